import Crypto

/// The `apns-id` of a notification: a name-based (version 5) UUID of the event ID and the token,
/// so a redelivered event carries the same apns-id and APNs-side repeats are visible.
public enum NotificationID {
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
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(36)
        for (index, byte) in bytes.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { text.append(UInt8(ascii: "-")) }
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
