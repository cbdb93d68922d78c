import Crypto
import Foundation
import NIOConcurrencyHelpers

/// Checks `authorization: bearer <jwt>` headers the way APNs does for token-based authentication.
///
/// A token whose signature, key id, algorithm and issuer were verified once is cached with its
/// `iat`, so the hot path does a dictionary look-up instead of an ECDSA verification. Only the age
/// check runs on every request.
final class ProviderTokenVerifier: Sendable {
    /// Apple rejects provider tokens issued more than one hour ago (403 `ExpiredProviderToken`;
    /// "Establishing a token-based connection to APNs",
    /// https://developer.apple.com/documentation/usernotifications/establishing-a-token-based-connection-to-apns).
    static let maximumTokenAgeSeconds: Int64 = 60 * 60
    /// Upper bound on cached tokens; the cache is cleared when it is reached (clients refresh
    /// tokens every 20 to 60 minutes, so the working set is tiny).
    static let cacheLimit = 4096

    private let publicKeys: [String: P256.Signing.PublicKey]
    private let teamID: String?
    /// Verified JWT string -> its `iat` (seconds since 1970).
    private let issuedAtByVerifiedToken = NIOLockedValueBox<[String: Int64]>([:])

    init(publicKeys: [String: P256.Signing.PublicKey], teamID: String?) {
        self.publicKeys = publicKeys
        self.teamID = teamID
    }

    /// False in certificate mode (no provider keys configured): no token checks at all.
    var isEnabled: Bool { !self.publicKeys.isEmpty }

    /// The rejection for this `authorization` header value, or `nil` when the token is acceptable.
    func rejection(forAuthorization authorization: String?, nowSeconds: Int64) -> Rejection? {
        guard let authorization, !authorization.isEmpty else { return .missingProviderToken }
        guard let token = Self.bearerToken(in: authorization) else { return .invalidProviderToken }
        guard !token.isEmpty else { return .missingProviderToken }

        let issuedAt: Int64
        if let cached = self.issuedAtByVerifiedToken.withLockedValue({ $0[token] }) {
            issuedAt = cached
        } else {
            guard let verified = self.verify(token) else { return .invalidProviderToken }
            issuedAt = verified
            self.issuedAtByVerifiedToken.withLockedValue { cache in
                if cache.count >= Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
                cache[token] = issuedAt
            }
        }
        if nowSeconds - issuedAt > Self.maximumTokenAgeSeconds { return .expiredProviderToken }
        return nil
    }

    /// The text after a case-insensitive `bearer ` scheme, or `nil` for another scheme.
    private static func bearerToken(in authorization: String) -> String? {
        let scheme = "bearer"
        var utf8 = authorization.utf8[...]
        for expected in scheme.utf8 {
            guard let byte = utf8.popFirst(), byte | 0x20 == expected else { return nil }
        }
        guard utf8.first == UInt8(ascii: " ") else {
            return utf8.isEmpty ? "" : nil
        }
        while utf8.first == UInt8(ascii: " ") { utf8.removeFirst() }
        return String(Substring(utf8))
    }

    private struct Header: Decodable {
        var alg: String
        var kid: String
    }

    private struct Claims: Decodable {
        var iss: String
        var iat: Int64
    }

    /// Full verification of a JWT not seen before; returns its `iat` when every check passes.
    private func verify(_ token: String) -> Int64? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerBytes = Encoding.base64URLDecode(parts[0]),
            let claimsBytes = Encoding.base64URLDecode(parts[1]),
            let signatureBytes = Encoding.base64URLDecode(parts[2])
        else { return nil }

        let decoder = JSONDecoder()
        guard let header = try? decoder.decode(Header.self, from: Data(headerBytes)),
            header.alg == "ES256",
            let publicKey = self.publicKeys[header.kid],
            let claims = try? decoder.decode(Claims.self, from: Data(claimsBytes))
        else { return nil }
        if let teamID = self.teamID, claims.iss != teamID { return nil }

        guard signatureBytes.count == 64,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        else { return nil }
        let signingInput = parts[0].utf8.count + 1 + parts[1].utf8.count
        let digest = SHA256.hash(data: Array(token.utf8.prefix(signingInput)))
        guard publicKey.isValidSignature(signature, for: digest) else { return nil }
        return claims.iat
    }
}
