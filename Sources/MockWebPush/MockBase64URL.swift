import Foundation

/// Unpadded base64url (RFC 4648 §5) as JWS (RFC 7515 §2) and the Push API use it, written here
/// rather than taken from WebPushCore: the mock checks what the sender encodes, so it must not
/// share the sender's code.
enum MockBase64URL {
    static func encode(_ bytes: [UInt8]) -> String {
        var text = ""
        for character in Data(bytes).base64EncodedString() {
            switch character {
            case "+": text.append("-")
            case "/": text.append("_")
            case "=": continue
            default: text.append(character)
            }
        }
        return text
    }

    /// The bytes of unpadded base64url `text`; nil for any other character (padding included)
    /// or a length no encoding has.
    static func decode(_ text: some StringProtocol) -> [UInt8]? {
        guard text.utf8.count % 4 != 1, text.utf8.allSatisfy(isAlphabet) else { return nil }
        var base64 = text.utf8.map { byte -> UInt8 in
            switch byte {
            case UInt8(ascii: "-"): UInt8(ascii: "+")
            case UInt8(ascii: "_"): UInt8(ascii: "/")
            default: byte
            }
        }
        while base64.count % 4 != 0 { base64.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(base64)).map { Array($0) }
    }

    static func isAlphabet(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default:
            false
        }
    }
}
