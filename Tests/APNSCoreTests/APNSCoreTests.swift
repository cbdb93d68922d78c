import ExactTime
import APNSCore
import Crypto
import Foundation
import Synchronization
import Testing

@Suite struct PushTypeTests {
    @Test(arguments: [
        (APNSPushType.alert, "com.example.app"),
        (.background, "com.example.app"),
        (.mdm, "com.example.app"),
        (.voip, "com.example.app.voip"),
        (.complication, "com.example.app.complication"),
        (.fileprovider, "com.example.app.pushkit.fileprovider"),
        (.location, "com.example.app.location-query"),
        (.pushtotalk, "com.example.app.voip-ptt"),
        (.liveactivity, "com.example.app.push-type.liveactivity"),
        (.widgets, "com.example.app.push-type.widgets"),
        (.controls, "com.example.app.push-type.controls"),
    ])
    func topicCarriesApplesSuffix(pushType: APNSPushType, expected: String) {
        #expect(pushType.apnsTopic(bundleID: "com.example.app") == expected)
    }

    @Test func backgroundDefaultsToPriorityFiveAndVoIPAllowsLargerPayloads() {
        #expect(APNSPushType.background.defaultPriority == .conserveEnergy)
        #expect(APNSPushType.alert.defaultPriority == .immediate)
        #expect(APNSPushType.voip.maximumPayloadSize == 5120)
        #expect(APNSPushType.alert.maximumPayloadSize == 4096)
    }
}

@Suite struct ReasonTests {
    @Test func knownReasonsRoundTrip() {
        for name in [
            "BadDeviceToken", "Unregistered", "ExpiredToken", "TooManyRequests", "ExpiredProviderToken",
            "BadEnvironmentKeyIdInToken", "Shutdown",
        ] {
            let reason = APNSReason(name)
            #expect(reason.rawValue == name)
            #expect(reason.isKnown, "\(name) should be known")
        }
        #expect(APNSReason("Unregistered") == .unregistered)
    }

    @Test func unknownReasonIsKeptNotFatal() {
        let reason = APNSReason("SomethingNew")
        #expect(!reason.isKnown)
        #expect(reason.rawValue == "SomethingNew")
        #expect(reason != .unregistered)
    }

    /// A reason matches in a `switch` like an enum case would, and one added later falls to
    /// `default` instead of breaking the caller's code.
    @Test func reasonsMatchInASwitchWithADefault() {
        func retriable(_ reason: APNSReason) -> Bool {
            switch reason {
            case .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown: true
            default: false
            }
        }
        #expect(retriable(APNSReason("TooManyRequests")))
        #expect(!retriable(APNSReason("BadDeviceToken")))
        #expect(!retriable(APNSReason("AddedByAppleLater")))
    }
}

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

@Suite struct JSONStringTests {
    @Test func escapesQuotesBackslashesAndControlCharactersAndKeepsTheRest() {
        #expect(JSONString.quoted("plain-ID_42") == #""plain-ID_42""#)
        #expect(JSONString.quoted("a\"b\\c") == #""a\"b\\c""#)
        #expect(JSONString.quoted("line\nfeed\r\ttab\u{0}nul\u{1F}") == #""line\nfeed\r\ttab\u0000nul\u001f""#)
        #expect(JSONString.quoted("café ✓ \u{7F}") == "\"café ✓ \u{7F}\"", "non-ASCII and DEL are valid JSON as they are")
    }
}

@Suite struct DurationTests {
    @Test func wholeUnitsAreExactAndRoundTowardsZero() {
        #expect(Duration.milliseconds(1_234).wholeMilliseconds == 1_234)
        #expect((Duration.seconds(604_800) + .microseconds(999)).wholeMilliseconds == 604_800_000)
        #expect(Duration.nanoseconds(1_500_000_001).wholeNanoseconds == 1_500_000_001)
        #expect(Duration.seconds(Int64.max / 2).wholeNanoseconds == 315_360_000 * 1_000_000_000, "ten years at most")
    }
}

@Suite struct BackoffTests {
    @Test func aFloorKeepsEveryWaitBetweenItsShareOfTheCeilingAndTheCeiling() {
        let reconnecting = Backoff(initial: .milliseconds(100), maximum: .seconds(30), floorPercent: 50)
        var generator = SystemRandomNumberGenerator()
        for attempt in [1, 3, 20] {
            let ceiling = reconnecting.ceiling(afterAttempt: attempt)
            let delays = (0..<200).map { _ in reconnecting.delay(afterAttempt: attempt, using: &generator) }
            #expect(delays.allSatisfy { $0 >= ceiling / 2 && $0 <= ceiling }, "attempt \(attempt), ceiling \(ceiling)")
        }
        #expect(reconnecting.ceiling(afterAttempt: 3) == .milliseconds(400))
        #expect(reconnecting.ceiling(afterAttempt: 20) == .seconds(30))
        let full = Backoff(initial: .seconds(1), maximum: .seconds(1))
        #expect((0..<200).map { _ in full.delay(afterAttempt: 1, using: &generator) }.contains { $0 < .milliseconds(500) })
    }
}
