import JSONCore
import NIOCore
import HTTP2Transport

/// APNs' error body `{"reason":"BadDeviceToken","timestamp":1700000000000}` (and the JSON in a
/// GOAWAY's debug data), read with the package's one JSON parser. Only error answers carry a
/// body, so the 200 path never gets here.
///
/// The top-level `reason` string and `timestamp` integer are picked (a fraction is truncated,
/// an exponent or an overflow is ignored); every other member and any value of another type is
/// ignored. A body that is not a JSON object yields neither: the status alone then classifies
/// the answer.
struct APNSResponseBody: Sendable, Hashable {
    var reason: String?
    var timestampMilliseconds: Int64?

    init(reason: String? = nil, timestampMilliseconds: Int64? = nil) {
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
    }

    init(parsing buffer: ByteBuffer) {
        self.init(parsing: Array(buffer.readableBytesView))
    }

    init(parsing bytes: [UInt8]) {
        self.init()
        guard let document = try? JSONParser.parse(bytes) else { return }
        reason = document["reason"]?.stringValue
        if case .number(let text) = document["timestamp"] { timestampMilliseconds = Self.integer(text) }
    }

    /// A JSON number's integer part; nil with an exponent or past Int64.
    private static func integer(_ number: String) -> Int64? {
        guard !number.contains(where: { $0 == "e" || $0 == "E" }) else { return nil }
        return Int64(number.prefix { $0 != "." })
    }
}
