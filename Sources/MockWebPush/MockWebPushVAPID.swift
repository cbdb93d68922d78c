import Crypto
import Foundation
import JSONCore

/// Verifies a push request's `Authorization: vapid t=<JWT>, k=<key>` (RFC 8292) on its own, with
/// swift-crypto: it shares no code with the sender's VAPIDSigner it checks.
enum MockWebPushVAPID {
    /// A token that passed every check.
    struct Verified {
        /// `sub`.
        var subject: String
        /// `aud`.
        var audience: String
        /// `k`: the uncompressed P-256 point.
        var publicKey: [UInt8]
    }

    enum Refusal: Error {
        /// No `vapid` scheme with `t` and a P-256 `k`: 401.
        case absent
        /// The JWT is malformed, badly signed, for another origin, expired or too long-lived, or
        /// its `sub` is no contact: 403.
        case badToken
    }

    /// The longest a token may live: RFC 8292 §2 has push services refuse an `exp` more than
    /// 24 hours after the request.
    static let maximumLifetimeSeconds: Int64 = 24 * 3600

    /// Checks `authorization` for a request to `origin` at `nowSeconds` (UNIX time).
    static func verify(authorization: String?, origin: String, nowSeconds: Int64) -> Result<Verified, Refusal> {
        guard let authorization, let (token, keyBytes) = parse(authorization),
            let publicKey = try? P256.Signing.PublicKey(x963Representation: keyBytes)
        else { return .failure(.absent) }
        // RFC 7515 compact serialization: three base64url parts, the signature over the first two.
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = MockBase64URL.decode(parts[0]), let claimsBytes = MockBase64URL.decode(parts[1]),
            let signatureBytes = MockBase64URL.decode(parts[2]),
            let header = try? JSONValue(parsing: headerBytes), let claims = try? JSONValue(parsing: claimsBytes)
        else { return .failure(.badToken) }
        // RFC 8292 §2: ES256 (RFC 7518 §3.4: the signature is r || s, 32 bytes each), and the
        // header of the RFC's example, {"typ":"JWT","alg":"ES256"}.
        guard header["alg"]?.stringValue == "ES256", header["typ"]?.stringValue?.uppercased() == "JWT",
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            publicKey.isValidSignature(signature, for: Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count)))
        else { return .failure(.badToken) }
        // RFC 8292 §2: `aud` is the origin of the push resource, `exp` at most 24 h ahead.
        // Apple answers 403 BadJwtToken when "The JWT audience claim isn't the origin of the push
        // service where you sent the request", "The JWT expiration parameter is more than one day
        // into the future" or "The JWT subject claim isn't a URL or mailto:"
        // (https://developer.apple.com/documentation/usernotifications/sending-web-push-notifications-in-web-apps-and-browsers).
        guard let audience = claims["aud"]?.stringValue, audience == origin,
            case .number(let expiryText)? = claims["exp"], let expiry = Int64(expiryText),
            expiry > nowSeconds, expiry <= nowSeconds + maximumLifetimeSeconds,
            let subject = claims["sub"]?.stringValue, subject.hasPrefix("mailto:") || subject.hasPrefix("https:")
        else { return .failure(.badToken) }
        return .success(Verified(subject: subject, audience: audience, publicKey: keyBytes))
    }

    /// `t` and the bytes of `k` from `vapid t=<JWT>, k=<key>`. RFC 8292 §3: the scheme and
    /// parameter names are case-insensitive auth-params (RFC 7235 §2.1), values tokens or quoted
    /// strings; `k` is the uncompressed point (RFC 8292 §3.2).
    static func parse(_ authorization: String) -> (token: Substring, key: [UInt8])? {
        let text = trimmed(authorization[...])
        guard let space = text.firstIndex(of: " "), text[..<space].lowercased() == "vapid" else { return nil }
        var token: Substring?
        var key: Substring?
        for parameter in text[space...].split(separator: ",") {
            let pair = parameter.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2 else { return nil }
            var value = trimmed(pair[1])
            if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
            switch trimmed(pair[0]).lowercased() {
            case "t": token = value
            case "k": key = value
            default: break
            }
        }
        guard let token, !token.isEmpty, let key, let keyBytes = MockBase64URL.decode(key), keyBytes.count == 65, keyBytes.first == 4
        else { return nil }
        return (token, keyBytes)
    }

    private static func trimmed(_ text: Substring) -> Substring {
        var text = text
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return text
    }
}
