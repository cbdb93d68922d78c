import HTTP2Transport
import JSONCore
public import PushCore
import APNSCore
public import Crypto
import Foundation

/// The key material for APNs token authentication: an ES256 key from a `.p8` file, its key ID
/// and the team ID that issues tokens.
public struct ProviderTokenCredentials: Sendable {
    public var keyID: String
    public var teamID: String
    public var privateKey: P256.Signing.PrivateKey

    public init(keyID: String, teamID: String, privateKey: P256.Signing.PrivateKey) {
        self.keyID = keyID
        self.teamID = teamID
        self.privateKey = privateKey
    }

    /// Reads a PKCS#8 PEM `.p8` key as Apple issues it.
    public init(keyID: String, teamID: String, p8PEM: String) throws {
        self.init(keyID: keyID, teamID: teamID, privateKey: try P256.Signing.PrivateKey(pemRepresentation: p8PEM))
    }

    /// Signs a provider token (JWT) issued at `issuedAt` UNIX seconds.
    public func signToken(issuedAt: Int64) throws -> String {
        let header = #"{"alg":"ES256","kid":"# + JSONString.quoted(keyID) + "}"
        let claims = #"{"iss":"# + JSONString.quoted(teamID) + #","iat":\#(issuedAt)}"#
        let signingInput = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try privateKey.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(Array(signature.rawRepresentation))
    }
}

/// Hands out the current provider token and refreshes it within Apple's window: a token is
/// reused for `refreshInterval` (between 20 and 60 minutes) and never replaced sooner than
/// 20 minutes after it was issued, so APNs never answers TooManyProviderTokenUpdates.
public actor ProviderTokenManager<C: Clock> where C.Duration == Duration {
    /// Apple's lower bound between two tokens of one key.
    public static var minimumTokenAge: Duration { .seconds(20 * 60) }
    /// Apple's upper bound on a token's age.
    public static var maximumTokenAge: Duration { .seconds(60 * 60) }

    private struct IssuedToken {
        var value: String
        var issuedAt: C.Instant
    }

    private let credentials: ProviderTokenCredentials
    private let clock: C
    private let epochSeconds: @Sendable () -> Int64
    private let refreshInterval: Duration
    private var current: IssuedToken?

    /// - Parameters:
    ///   - refreshInterval: how long a token is used; clamped to 20...55 minutes (the upper bound
    ///     leaves slack under Apple's 60 so clock skew cannot expire a token in use).
    ///   - epochSeconds: the wall clock for the `iat` claim.
    public init(
        credentials: ProviderTokenCredentials,
        clock: C,
        refreshInterval: Duration = .seconds(50 * 60),
        epochSeconds: @escaping @Sendable () -> Int64 = { WallClock.secondsSince1970() }
    ) {
        self.credentials = credentials
        self.clock = clock
        self.epochSeconds = epochSeconds
        self.refreshInterval = min(max(refreshInterval, Self.minimumTokenAge), .seconds(55 * 60))
    }

    /// The token to put in `authorization: bearer …` now.
    public func currentToken() throws -> String {
        let now = clock.now
        if let current, current.issuedAt.duration(to: now) < refreshInterval {
            return current.value
        }
        return try issue(at: now)
    }

    /// Called after APNs answered ExpiredProviderToken for `token`. Issues a new token when
    /// `token` is still the current one and Apple's minimum age allows it; returns whether the
    /// caller now has a different token to retry with.
    public func replaceExpired(_ token: String) throws -> Bool {
        guard let current else { return true }
        if current.value != token { return true }
        let now = clock.now
        guard current.issuedAt.duration(to: now) >= Self.minimumTokenAge else { return false }
        _ = try issue(at: now)
        return true
    }

    private func issue(at now: C.Instant) throws -> String {
        let value = try credentials.signToken(issuedAt: epochSeconds())
        current = IssuedToken(value: value, issuedAt: now)
        return value
    }
}

/// Base64 with the URL alphabet and no padding, as JWTs use it.
public enum Base64URL {
    public static func encode(_ bytes: [UInt8]) -> String {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64).map(Array.init)
    }
}
