public import PushCore

/// Who an FCM message goes to: a registration token or, since 2026, a Firebase Installation ID
/// (sent in the message's `fid` member instead of `token`).
public enum FCMTarget: Sendable, Hashable {
    case token(String)
    case fid(String)

    /// The registry's `fcm_target` spelling: `token` or `fid`.
    public var kind: String {
        switch self {
        case .token: "token"
        case .fid: "fid"
        }
    }

    /// The token or installation ID, as the app got it.
    public var value: String {
        switch self {
        case .token(let value), .fid(let value): value
        }
    }

    /// The target for a push.tokens registration: `value` as given (never lowercased), 1..4096
    /// bytes without whitespace or control characters; `kind` `token` (the default) or `fid`.
    public init(registration value: String, kind: String?) throws(InputRejection) {
        guard (1...4096).contains(value.utf8.count) else {
            throw InputRejection(.invalidToken, "an FCM token must be 1..4096 bytes")
        }
        guard !value.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F }) else {
            throw InputRejection(.invalidToken, "an FCM token must not contain whitespace or control characters")
        }
        switch kind {
        case nil, "token": self = .token(value)
        case "fid": self = .fid(value)
        default: throw InputRejection(.schemaViolation, "fcm_target must be token or fid")
        }
    }

    /// The first characters only, for logs: a whole token is never logged.
    public var redacted: String {
        let text = value
        return text.count <= 8 ? "\(kind):…" : "\(kind):\(text.prefix(8))…"
    }
}
