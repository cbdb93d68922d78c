import Crypto

/// The `apns-id` of a notification: a name-based (version 5) UUID of the event ID and the token,
/// so a redelivered event carries the same apns-id and APNs-side repeats are visible.
package enum NotificationID {
    /// Herald's namespace for version-5 UUIDs (fixed forever: changing it changes every apns-id).
    private static let namespace: [UInt8] = [
        0x6b, 0x3c, 0x2f, 0x10, 0x8d, 0x5e, 0x4a, 0x71, 0x9b, 0x0e, 0x2c, 0x47, 0x5a, 0x11, 0xe3, 0x90,
    ]

    /// The lowercase UUID for (event ID, token). The name is `eventID + "/" + token`; tokens are
    /// hex, so the split is unambiguous. Derived twice per device (for the request and for its
    /// result), so it hashes the strings in place and writes the text once: no array per part.
    public static func derive(eventID: String, token: String) -> String {
        var hasher = Insecure.SHA1()
        hasher.update(data: namespace)
        update(&hasher, with: eventID)
        update(&hasher, with: "/")
        update(&hasher, with: token)
        return hasher.finalize().withUnsafeBytes { digest in
            String(unsafeUninitializedCapacity: 36) { text in
                var length = 0
                for index in 0..<16 {
                    var byte = digest[index]
                    if index == 6 { byte = (byte & 0x0F) | 0x50 }
                    if index == 8 { byte = (byte & 0x3F) | 0x80 }
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        text[length] = UInt8(ascii: "-")
                        length += 1
                    }
                    text[length] = hexDigits[Int(byte >> 4)]
                    text[length + 1] = hexDigits[Int(byte & 0x0F)]
                    length += 2
                }
                return length
            }
        }
    }

    private static func update(_ hasher: inout Insecure.SHA1, with text: String) {
        var text = text
        text.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// The `apns-collapse-id` Herald derives for an event without one
    /// (HERALD_APNS_DERIVED_COLLAPSE_ID): 40 hex digits of SHA-1 over the namespace and the event
    /// ID, so every device's copy, and a crash's repeat of it, collapse into one on the device.
    /// Always within APNs' 64 bytes and free of characters a header value cannot carry.
    public static func collapseID(eventID: String) -> String {
        var hasher = Insecure.SHA1()
        hasher.update(data: namespace)
        hasher.update(data: Array("collapse/".utf8))
        update(&hasher, with: eventID)
        return String(decoding: hasher.finalize().flatMap { [hexDigits[Int($0 >> 4)], hexDigits[Int($0 & 0x0F)]] }, as: UTF8.self)
    }
}
