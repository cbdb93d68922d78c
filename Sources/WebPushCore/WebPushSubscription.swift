import Crypto
import Foundation

/// A browser's push subscription as `PushSubscription.toJSON()` gives it: where to POST, and the
/// keys its messages are encrypted to. Made only from checked input (``init(endpoint:p256dh:auth:allowing:)``).
public struct WebPushSubscription: Sendable, Hashable {
    /// The push service's URL for this subscription (`https`, an allowed host).
    public let endpoint: String
    /// The endpoint's origin, `https://host[:port]`: the VAPID token's `aud`.
    public let origin: String
    public let keys: WebPushSubscriptionKeys

    /// The longest endpoint accepted.
    public static let maximumEndpointBytes = 2048

    /// Checks a subscription: `endpoint` is `https`, at most 2,048 bytes, on a host `allowList`
    /// allows, without user or fragment; `p256dh` is base64url of a point on P-256
    /// (uncompressed, 65 bytes) and `auth` base64url of 16 bytes.
    public init(endpoint: String, p256dh: String, auth: String, allowing allowList: WebPushHostAllowList) throws(WebPushSubscriptionError) {
        guard endpoint.utf8.count <= Self.maximumEndpointBytes else { throw .endpointTooLong }
        guard let url = URLComponents(string: endpoint), url.scheme?.lowercased() == "https", let host = url.host, !host.isEmpty,
            url.user == nil, url.password == nil, url.fragment == nil
        else { throw .endpointNotHTTPS }
        guard allowList.allows(host: host) else { throw .hostNotAllowed(host) }
        self.endpoint = endpoint
        self.origin = "https://\(host.lowercased())" + (url.port.map { ":\($0)" } ?? "")
        self.keys = try WebPushSubscriptionKeys(p256dh: p256dh, auth: auth)
    }
}

/// A subscription's keys: the user agent's P-256 public key and its 16-byte authentication secret.
public struct WebPushSubscriptionKeys: Sendable, Hashable {
    /// The uncompressed point (65 bytes).
    public let p256dh: [UInt8]
    public let auth: [UInt8]
    let publicKey: P256.KeyAgreement.PublicKey

    /// Checks base64url `p256dh` (a point on P-256) and `auth` (16 bytes).
    public init(p256dh: String, auth: String) throws(WebPushSubscriptionError) {
        guard let point = Base64URL.decode(p256dh), point.count == 65, point.first == 4,
            let key = try? P256.KeyAgreement.PublicKey(x963Representation: point)
        else { throw .badP256DH }
        guard let secret = Base64URL.decode(auth), secret.count == 16 else { throw .badAuth }
        self.p256dh = point
        self.auth = secret
        self.publicKey = key
    }

    public static func == (left: Self, right: Self) -> Bool { left.p256dh == right.p256dh && left.auth == right.auth }
    public func hash(into hasher: inout Hasher) {
        hasher.combine(p256dh)
        hasher.combine(auth)
    }
}

/// Why a subscription is refused (result and dead-letter reason `invalid_token`).
public enum WebPushSubscriptionError: Error, Sendable, Hashable, CustomStringConvertible {
    case endpointTooLong
    case endpointNotHTTPS
    case hostNotAllowed(String)
    case badP256DH
    case badAuth

    public var description: String {
        switch self {
        case .endpointTooLong: "the endpoint is longer than \(WebPushSubscription.maximumEndpointBytes) bytes"
        case .endpointNotHTTPS: "the endpoint is not an https URL without user or fragment"
        case .hostNotAllowed(let host): "the endpoint's host \(host) is not in HERALD_WEBPUSH_ALLOWED_HOSTS"
        case .badP256DH: "keys.p256dh is not base64url of an uncompressed P-256 point"
        case .badAuth: "keys.auth is not base64url of 16 bytes"
        }
    }
}

/// The push-service hosts Herald may connect to: each entry a host name (`fcm.googleapis.com`)
/// or a wildcard for its subdomains (`*.push.apple.com`, not `push.apple.com` itself), compared
/// without case. An endpoint is untrusted input: a sender that POSTs wherever it is told forges
/// requests for whoever registers a subscription.
public struct WebPushHostAllowList: Sendable, Hashable {
    public let entries: [String]

    /// The push services of Chrome, Safari, Firefox and Edge.
    public static let standard = WebPushHostAllowList([
        "fcm.googleapis.com", "*.push.apple.com", "updates.push.services.mozilla.com", "*.notify.windows.com",
    ])

    public init(_ entries: [String]) {
        self.entries = entries.map { $0.lowercased() }
    }

    /// The list HERALD_WEBPUSH_ALLOWED_HOSTS spells: comma-separated hosts, each a name or
    /// `*.` and a domain; nil when an entry is empty or has a scheme, port, path or space.
    public init?(parsing text: String) {
        let entries = text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        let valid = entries.allSatisfy { entry in
            let name = entry.hasPrefix("*.") ? entry.dropFirst(2) : Substring(entry)
            return !name.isEmpty && name.unicodeScalars.allSatisfy { $0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "." || $0 == "-" }
        }
        guard valid else { return nil }
        self.init(entries)
    }

    public func allows(host: String) -> Bool {
        let host = host.lowercased()
        return entries.contains { entry in
            entry.hasPrefix("*.") ? host.hasSuffix(entry.dropFirst()) && host.count > entry.count - 1 : host == entry
        }
    }
}
