import KafkaMessages
import PushCore
import APNSCore
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PostgresNIO

/// A benchmark run that went wrong (printed as `Error: …`, exit code 1, without the usage text).
struct BenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Wall-clock time in milliseconds since 1970, comparable with Kafka record timestamps.
func wallMilliseconds() -> Int64 { WallClock.millisecondsSince1970() }

/// The string value of `"key":"…"` in compact JSON as Herald writes it (no spaces, and the
/// values read here, ids, hex tokens and statuses, need no escapes); nil when absent or null.
func jsonString(_ key: [UInt8], in bytes: [UInt8]) -> String? {
    guard let range = bytes.firstRange(of: key),
        let end = bytes[range.upperBound...].firstIndex(of: UInt8(ascii: "\""))
    else { return nil }
    return String(decoding: bytes[range.upperBound..<end], as: UTF8.self)
}

/// The non-negative integer after `key` (which ends with `:`), read as digits.
func jsonInteger(_ key: [UInt8], in bytes: [UInt8]) -> Int64? {
    guard let range = bytes.firstRange(of: key) else { return nil }
    let digits = bytes[range.upperBound...].prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    guard !digits.isEmpty else { return nil }
    return digits.reduce(0) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
}
