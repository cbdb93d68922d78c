import Crypto
import Foundation

/// Which VAPID key pair serves which web apps, with the keys each app used before.
///
/// Each entry lists its apps; an app no entry lists goes to ``fallback`` when set
/// (HERALD_WEBPUSH_VAPID_KEY_PATH). A subscription is bound to the key it was created with: a
/// request names that key's public half, and the entry's current or previous keys must hold it.
public struct WebPushCredentials: Sendable {
    /// The signers of one or more apps: the current key and the previous ones still honoured.
    public struct Entry: Sendable {
        public var apps: [String]
        public var current: VAPIDSigner
        public var previous: [VAPIDSigner]

        public init(apps: [String], current: VAPIDSigner, previous: [VAPIDSigner] = []) {
            self.apps = apps
            self.current = current
            self.previous = previous
        }

        /// The signer whose public key is `publicKey` (nil: the current one).
        func signer(publicKey: String?) -> VAPIDSigner? {
            guard let publicKey, publicKey != current.publicKeyText else { return current }
            return previous.first { $0.publicKeyText == publicKey }
        }
    }

    public var entries: [Entry]
    public var fallback: Entry?

    public init(entries: [Entry] = [], fallback: Entry? = nil) {
        self.entries = entries
        self.fallback = fallback
    }

    /// The signer for a subscription of `app` made with `publicKey` (nil: the app's current key).
    public func signer(app: String, publicKey: String?) -> VAPIDSigner? {
        (entries.first { $0.apps.contains(app) } ?? fallback)?.signer(publicKey: publicKey)
    }

    /// Whether `other` serves the same apps with the same keys and contacts (a reload that
    /// changes nothing applies nothing).
    public func hasSameKeys(as other: WebPushCredentials) -> Bool {
        func description(_ entry: Entry?) -> [String] {
            guard let entry else { return [] }
            return entry.apps + [entry.current.subject, entry.current.publicKeyText] + entry.previous.map(\.publicKeyText)
        }
        return entries.map(description) == other.entries.map(description) && description(fallback) == description(other.fallback)
    }

    /// Whether any key serves `app`.
    public func serves(app: String) -> Bool {
        entries.contains { $0.apps.contains(app) } || fallback != nil
    }
}

extension VAPIDSigner {
    /// A signer for the key at `path` (a P-256 private key as PEM, or its 32 bytes in base64url)
    /// with contact `subject` (`mailto:` or `https:`).
    public convenience init(keyPath path: String, subject: String) throws(VAPIDKeyError) {
        guard subject.hasPrefix("mailto:") || subject.hasPrefix("https:") else { throw .badSubject }
        guard let data = FileManager.default.contents(atPath: path) else { throw .unreadable(path) }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let key: P256.Signing.PrivateKey
        if text.hasPrefix("-----BEGIN"), let pem = try? P256.Signing.PrivateKey(pemRepresentation: text) {
            key = pem
        } else if let raw = Base64URL.decode(text), raw.count == 32, let scalar = try? P256.Signing.PrivateKey(rawRepresentation: raw) {
            key = scalar
        } else {
            throw .notAP256Key(path)
        }
        self.init(key: key, subject: subject)
    }
}

/// Why a VAPID key cannot be used.
public enum VAPIDKeyError: Error, Sendable, Hashable, CustomStringConvertible {
    case unreadable(String)
    case notAP256Key(String)
    case badSubject

    public var description: String {
        switch self {
        case .unreadable(let path): "the VAPID key file \(path) cannot be read"
        case .notAP256Key(let path): "\(path) holds neither a P-256 private key in PEM nor its 32 bytes in base64url"
        case .badSubject: "a VAPID subject must be a mailto: or https: contact"
        }
    }
}
