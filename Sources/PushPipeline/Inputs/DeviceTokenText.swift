package import PushCore

/// Device tokens in the forms apps send them.
package enum DeviceTokenText {
    /// Removes spaces and angle brackets (NSData's description), lowercases, and checks for
    /// 32..200 hex digits of even length. Apple says token length varies: no fixed size.
    public static func normalize(_ text: String) throws(InputRejection) -> String {
        var digits: [UInt8] = []
        digits.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "<"), UInt8(ascii: ">"): continue
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): digits.append(byte)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digits.append(byte + 32)
            default: throw InputRejection(.invalidToken, "token contains a character that is not hex")
            }
        }
        guard digits.count % 2 == 0, (32...200).contains(digits.count) else {
            throw InputRejection(.invalidToken, "token must be 32..200 hex digits of even length, got \(digits.count)")
        }
        return String(decoding: digits, as: UTF8.self)
    }

    /// A token shortened for logs: never log one whole.
    public static func redacted(_ token: String) -> String {
        token.count <= 8 ? "…" : String(token.prefix(8)) + "…"
    }
}
