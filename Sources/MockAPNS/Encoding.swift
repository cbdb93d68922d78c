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
        // Two 64-bit draws (one syscall each) rather than sixteen byte-sized ones: this runs for
        // every request without an apns-id.
        var generator = SystemRandomNumberGenerator()
        var high = generator.next() as UInt64
        var low = generator.next() as UInt64
        high = (high & ~0xF000) | 0x4000  // version 4 (bits 12-15 of the third group)
        low = (low & ~(0xC000 << 48)) | (0x8000 << 48)  // RFC 4122 variant
        return String(unsafeUninitializedCapacity: 36) { characters in
            var position = 0
            func appendHex(_ value: UInt64, nibbles: Int) {
                var shift = (nibbles - 1) * 4
                while shift >= 0 {
                    characters[position] = Self.hexDigits[Int((value >> UInt64(shift)) & 0xF)]
                    position += 1
                    shift -= 4
                }
            }
            func appendDash() {
                characters[position] = UInt8(ascii: "-")
                position += 1
            }
            appendHex(high >> 32, nibbles: 8)
            appendDash()
            appendHex(high >> 16, nibbles: 4)
            appendDash()
            appendHex(high, nibbles: 4)
            appendDash()
            appendHex(low >> 48, nibbles: 4)
            appendDash()
            appendHex(low, nibbles: 12)
            return position
        }
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

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

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
