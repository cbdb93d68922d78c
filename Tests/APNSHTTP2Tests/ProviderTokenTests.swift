import APNSHTTP2
import Crypto
import Synchronization
import Testing

/// A clock the test moves by hand.
final class ManualClock: Clock, Sendable {
    struct Instant: InstantProtocol {
        var offset: Duration
        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private let current = Mutex(Instant(offset: .zero))
    var now: Instant { current.withLock { $0 } }
    var minimumResolution: Duration { .nanoseconds(1) }

    func advance(by duration: Duration) {
        current.withLock { $0 = $0.advanced(by: duration) }
    }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        while now < deadline { try await Task.sleep(for: .milliseconds(1)) }
    }
}

@Suite struct ProviderTokenTests {
    let credentials = ProviderTokenCredentials(keyID: "ABC123DEFG", teamID: "TEAM987654", privateKey: P256.Signing.PrivateKey())

    @Test func tokenIsAnES256JWTWithKeyIDTeamAndIssuedAt() throws {
        let token = try credentials.signToken(issuedAt: 1_700_000_000)
        let parts = token.split(separator: ".")
        #expect(parts.count == 3)
        let header = try #require(Base64URL.decode(parts[0]))
        let claims = try #require(Base64URL.decode(parts[1]))
        #expect(String(decoding: header, as: UTF8.self) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(String(decoding: claims, as: UTF8.self) == #"{"iss":"TEAM987654","iat":1700000000}"#)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64URL.decode(parts[2])))
        #expect(credentials.privateKey.publicKey.isValidSignature(signature, for: Array("\(parts[0]).\(parts[1])".utf8)))
    }

    @Test func tokenIsReusedUntilTheRefreshIntervalThenReplaced() async throws {
        let clock = ManualClock()
        let seconds = Atomic<Int64>(1_700_000_000)
        let manager = ProviderTokenManager(
            credentials: credentials,
            clock: clock,
            refreshInterval: .seconds(50 * 60),
            epochSeconds: { seconds.load(ordering: .relaxed) }
        )
        let first = try await manager.currentToken()
        clock.advance(by: .seconds(49 * 60))
        seconds.add(49 * 60, ordering: .relaxed)
        #expect(try await manager.currentToken() == first)
        clock.advance(by: .seconds(60))
        seconds.add(60, ordering: .relaxed)
        let second = try await manager.currentToken()
        #expect(second != first)
    }

    @Test func refreshIntervalIsClampedToApplesWindow() async throws {
        let clock = ManualClock()
        let seconds = Atomic<Int64>(1_700_000_000)
        let manager = ProviderTokenManager(
            credentials: credentials,
            clock: clock,
            refreshInterval: .seconds(60),
            epochSeconds: { seconds.load(ordering: .relaxed) }
        )
        let first = try await manager.currentToken()
        clock.advance(by: .seconds(19 * 60))
        seconds.add(19 * 60, ordering: .relaxed)
        #expect(try await manager.currentToken() == first, "never refreshed sooner than 20 minutes")
    }

    @Test func expiredTokenIsReplacedOnlyOnceAndNotWhenYoung() async throws {
        let clock = ManualClock()
        let seconds = Atomic<Int64>(1_700_000_000)
        let manager = ProviderTokenManager(
            credentials: credentials,
            clock: clock,
            epochSeconds: { seconds.load(ordering: .relaxed) }
        )
        let first = try await manager.currentToken()
        clock.advance(by: .seconds(5 * 60))
        #expect(try await manager.replaceExpired(first) == false, "a 5-minute-old token is not replaced")
        #expect(try await manager.currentToken() == first)
        clock.advance(by: .seconds(20 * 60))
        seconds.add(25 * 60, ordering: .relaxed)
        #expect(try await manager.replaceExpired(first) == true)
        let second = try await manager.currentToken()
        #expect(second != first)
        // A second caller that saw the old token does not trigger another refresh.
        #expect(try await manager.replaceExpired(first) == true)
        #expect(try await manager.currentToken() == second)
    }
}
