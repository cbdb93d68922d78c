import Crypto

/// The `apns-id` of a notification: a name-based (version 5) UUID of the event ID and the token,
/// so a redelivered event carries the same apns-id and APNs-side repeats are visible.
package enum NotificationID {
    /// Herald's namespace for version-5 UUIDs (fixed forever: changing it changes every apns-id).
    private static let namespace: [UInt8] = [
        0x6b, 0x3c, 0x2f, 0x10, 0x8d, 0x5e, 0x4a, 0x71, 0x9b, 0x0e, 0x2c, 0x47, 0x5a, 0x11, 0xe3, 0x90,
    ]

    /// The lowercase UUID for (event ID, token). The name is `eventID + "/" + token`; tokens are
    /// hex, so the split is unambiguous.
    public static func derive(eventID: String, token: String) -> String {
        var hasher = Insecure.SHA1()
        hasher.update(data: namespace)
        hasher.update(data: Array(eventID.utf8))
        hasher.update(data: [UInt8(ascii: "/")])
        hasher.update(data: Array(token.utf8))
        var bytes = Array(hasher.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return hexadecimal(bytes, dashesBefore: [4, 6, 8, 10])
    }

    /// The `apns-collapse-id` Herald derives for an event without one
    /// (HERALD_APNS_DERIVED_COLLAPSE_ID): 40 hex digits of SHA-1 over the namespace and the event
    /// ID, so every device's copy, and a crash's repeat of it, collapse into one on the device.
    /// Always within APNs' 64 bytes and free of characters a header value cannot carry.
    public static func collapseID(eventID: String) -> String {
        var hasher = Insecure.SHA1()
        hasher.update(data: namespace)
        hasher.update(data: Array("collapse/".utf8))
        hasher.update(data: Array(eventID.utf8))
        return hexadecimal(Array(hasher.finalize()), dashesBefore: [])
    }

    private static func hexadecimal(_ bytes: [UInt8], dashesBefore dashes: Set<Int>) -> String {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2 + dashes.count)
        for (index, byte) in bytes.enumerated() {
            if dashes.contains(index) { text.append(UInt8(ascii: "-")) }
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
