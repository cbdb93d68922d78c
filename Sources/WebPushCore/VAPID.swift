public import Crypto
import JSONCore
import Synchronization

/// VAPID (RFC 8292) for one application server key: the `Authorization` header of a push
/// request, an ES256 JWT for the push service's origin, cached per origin and signed again an
/// hour before it expires (tokens live ``tokenLifetimeSeconds``, half the 24 h limit).
public final class VAPIDSigner: Sendable {
    /// A token's lifetime: 12 h, well inside the 24 h RFC 8292 allows.
    public static let tokenLifetimeSeconds: Int64 = 12 * 3600
    /// How long before its expiry a cached token is replaced.
    public static let renewalMarginSeconds: Int64 = 3600

    private let key: P256.Signing.PrivateKey
    /// The `sub` claim: a `mailto:` or `https:` contact.
    public let subject: String
    /// `k`: the public key, base64url of the uncompressed point.
    public let publicKeyText: String
    private let tokens = Mutex<[String: (token: String, expiresAt: Int64)]>([:])

    public init(key: P256.Signing.PrivateKey, subject: String) {
        self.key = key
        self.subject = subject
        self.publicKeyText = Base64URL.encode(key.publicKey.x963Representation)
    }

    /// `vapid t=<JWT>, k=<public key>` for a request to `origin` at `nowSeconds` (UNIX time).
    public func authorization(origin: String, nowSeconds: Int64) throws -> String {
        let cached = tokens.withLock { $0[origin] }
        if let cached, cached.expiresAt - Self.renewalMarginSeconds > nowSeconds {
            return "vapid t=\(cached.token), k=\(publicKeyText)"
        }
        let expiresAt = nowSeconds + Self.tokenLifetimeSeconds
        let token = try self.token(audience: origin, expiresAt: expiresAt)
        tokens.withLock { $0[origin] = (token, expiresAt) }
        return "vapid t=\(token), k=\(publicKeyText)"
    }

    /// A JWT `{"typ":"JWT","alg":"ES256"}` with `aud`, `exp` and `sub`, signed with the key.
    func token(audience: String, expiresAt: Int64) throws -> String {
        var claims: [UInt8] = Array(#"{"aud":"#.utf8)
        JSONString.write(audience, to: &claims)
        claims += Array(#","exp":\#(expiresAt),"sub":"#.utf8)
        JSONString.write(subject, to: &claims)
        claims.append(UInt8(ascii: "}"))
        let signingInput = Self.header + "." + Base64URL.encode(claims)
        let signature = try key.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }

    private static let header = Base64URL.encode(Array(#"{"typ":"JWT","alg":"ES256"}"#.utf8))
}
