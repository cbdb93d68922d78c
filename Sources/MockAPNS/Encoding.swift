/// Small byte-level helpers for the request hot path: no Foundation, no regex.
enum Encoding {
    /// Decodes unpadded (or padded) base64url, as used by JWT. Returns `nil` on any invalid character.
    static func base64URLDecode(_ text: Substring) -> [UInt8]? {
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bitCount = 0
        var sawPadding = false
        for byte in text.utf8 {
            if byte == UInt8(ascii: "=") {
                sawPadding = true
                continue
            }
            if sawPadding { return nil }  // data after padding
            let value: UInt8
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = byte - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = byte - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte - UInt8(ascii: "0") + 52
            case UInt8(ascii: "-"): value = 62
            case UInt8(ascii: "_"): value = 63
            default: return nil
            }
            accumulator = (accumulator << 6) | UInt32(value)
            bitCount += 6
            if bitCount >= 8 {
                bitCount -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bitCount)))
            }
        }
        // A single leftover character (6 bits) cannot encode a byte.
        if bitCount >= 6 { return nil }
        return output
    }

    /// True when `text` is a non-empty, even-length run of hex digits.
    static func isEvenLengthHex(_ text: Substring) -> Bool {
        var count = 0
        for byte in text.utf8 {
            guard isHexDigit(byte) else { return false }
            count += 1
        }
        return count > 0 && count % 2 == 0
    }

    /// True when `text` is a UUID in its canonical 8-4-4-4-12 form (either case).
    static func isCanonicalUUID(_ text: String) -> Bool {
        var count = 0
        for byte in text.utf8 {
            switch count {
            case 8, 13, 18, 23:
                guard byte == UInt8(ascii: "-") else { return false }
            default:
                guard isHexDigit(byte) else { return false }
            }
            count += 1
        }
        return count == 36
    }

    /// A fresh random (version 4) UUID in lowercase canonical form.
    static func randomLowercaseUUID() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        bytes[6] = (bytes[6] & 0x0F) | 0x40  // version 4
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 4122 variant
        let hexDigits = Array("0123456789abcdef".utf8)
        var characters: [UInt8] = []
        characters.reserveCapacity(36)
        for (index, byte) in bytes.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 {
                characters.append(UInt8(ascii: "-"))
            }
            characters.append(hexDigits[Int(byte >> 4)])
            characters.append(hexDigits[Int(byte & 0x0F)])
        }
        return String(decoding: characters, as: UTF8.self)
    }

    /// ASCII-lowercases `text` (device tokens and UUIDs are ASCII).
    static func asciiLowercased(_ text: Substring) -> String {
        var needsChange = false
        for byte in text.utf8 where byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") {
            needsChange = true
            break
        }
        guard needsChange else { return String(text) }
        return String(
            decoding: text.utf8.map { byte in
                (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) ? byte + 32 : byte
            },
            as: UTF8.self
        )
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            return true
        default:
            return false
        }
    }
}
