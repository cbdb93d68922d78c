import NIOCore

/// Reads APNs' error body `{"reason":"BadDeviceToken","timestamp":1700000000000}` (and the JSON in
/// a GOAWAY's debug data) without Foundation. Only error answers carry a body, so the 200 path
/// never gets here.
///
/// The scanner accepts any JSON object, picks the top-level `reason` string and `timestamp`
/// integer, and skips every other member. Malformed input yields what was read before the error.
struct APNSResponseBody: Sendable, Hashable {
    var reason: String?
    var timestampMilliseconds: Int64?

    init(reason: String? = nil, timestampMilliseconds: Int64? = nil) {
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
    }

    init(parsing buffer: ByteBuffer) {
        self.init()
        buffer.withUnsafeReadableBytes { bytes in
            var scanner = Scanner(bytes: bytes)
            scanner.readObject(into: &self)
        }
    }

    init(parsing bytes: [UInt8]) {
        self.init()
        bytes.withUnsafeBytes { bytes in
            var scanner = Scanner(bytes: bytes)
            scanner.readObject(into: &self)
        }
    }

    private struct Malformed: Error {}

    private struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        init(bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
        }

        mutating func readObject(into body: inout APNSResponseBody) {
            do {
                skipWhitespace()
                try expect(UInt8(ascii: "{"))
                skipWhitespace()
                if peek() == UInt8(ascii: "}") { return }
                while true {
                    skipWhitespace()
                    let key = try readString()
                    skipWhitespace()
                    try expect(UInt8(ascii: ":"))
                    skipWhitespace()
                    switch key {
                    case "reason" where peek() == UInt8(ascii: "\""):
                        body.reason = try readString()
                    case "timestamp" where peek().map(Self.startsNumber) == true:
                        body.timestampMilliseconds = try readInteger()
                    default:
                        try skipValue(depth: 0)
                    }
                    skipWhitespace()
                    guard let next = peek() else { throw Malformed() }
                    index += 1
                    if next == UInt8(ascii: "}") { return }
                    guard next == UInt8(ascii: ",") else { throw Malformed() }
                }
            } catch {
                return
            }
        }

        private static func startsNumber(_ byte: UInt8) -> Bool {
            byte == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        }

        private func peek() -> UInt8? {
            index < bytes.count ? bytes[index] : nil
        }

        private mutating func skipWhitespace() {
            while let byte = peek(), byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D {
                index += 1
            }
        }

        private mutating func expect(_ byte: UInt8) throws {
            guard peek() == byte else { throw Malformed() }
            index += 1
        }

        /// Reads a JSON string, decoding escapes (including `\uXXXX` and surrogate pairs).
        private mutating func readString() throws -> String {
            try expect(UInt8(ascii: "\""))
            var utf8: [UInt8] = []
            while true {
                guard let byte = peek() else { throw Malformed() }
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(decoding: utf8, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard let escaped = peek() else { throw Malformed() }
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escaped)
                    case UInt8(ascii: "b"): utf8.append(0x08)
                    case UInt8(ascii: "f"): utf8.append(0x0C)
                    case UInt8(ascii: "n"): utf8.append(0x0A)
                    case UInt8(ascii: "r"): utf8.append(0x0D)
                    case UInt8(ascii: "t"): utf8.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try readHex4()
                        if (0xD800..<0xDC00).contains(scalar), peek() == UInt8(ascii: "\\"),
                            index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u")
                        {
                            index += 2
                            let low = try readHex4()
                            guard (0xDC00..<0xE000).contains(low) else { throw Malformed() }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        }
                        let character = Unicode.Scalar(scalar) ?? "\u{FFFD}"
                        utf8.append(contentsOf: String(character).utf8)
                    default:
                        throw Malformed()
                    }
                default:
                    utf8.append(byte)
                }
            }
        }

        private mutating func readHex4() throws -> UInt32 {
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard let byte = peek() else { throw Malformed() }
                index += 1
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw Malformed()
                }
                value = value << 4 | UInt32(digit)
            }
            return value
        }

        /// Reads a JSON number as an integer; a fraction is truncated, an exponent or overflow is malformed.
        private mutating func readInteger() throws -> Int64 {
            var negative = false
            if peek() == UInt8(ascii: "-") {
                negative = true
                index += 1
            }
            var value: Int64 = 0
            var digits = 0
            while let byte = peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times10.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
                guard !overflow1, !overflow2 else { throw Malformed() }
                value = sum
                digits += 1
                index += 1
            }
            guard digits > 0 else { throw Malformed() }
            if peek() == UInt8(ascii: ".") {
                index += 1
                while let byte = peek(), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { index += 1 }
            }
            if let byte = peek(), byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") { throw Malformed() }
            return negative ? -value : value
        }

        /// Skips one JSON value of any kind.
        private mutating func skipValue(depth: Int) throws {
            guard depth < 32, let byte = peek() else { throw Malformed() }
            switch byte {
            case UInt8(ascii: "\""):
                _ = try readString()
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                let close = byte == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
                index += 1
                skipWhitespace()
                if peek() == close {
                    index += 1
                    return
                }
                while true {
                    skipWhitespace()
                    if close == UInt8(ascii: "}") {
                        _ = try readString()
                        skipWhitespace()
                        try expect(UInt8(ascii: ":"))
                        skipWhitespace()
                    }
                    try skipValue(depth: depth + 1)
                    skipWhitespace()
                    guard let next = peek() else { throw Malformed() }
                    index += 1
                    if next == close { return }
                    guard next == UInt8(ascii: ",") else { throw Malformed() }
                }
            default:
                // A number or a literal (true, false, null): consume its characters.
                let start = index
                while let next = peek(), !" \t\r\n,}]".utf8.contains(next) { index += 1 }
                guard index > start else { throw Malformed() }
            }
        }
    }
}
