import JSONCore
import PushCore
import APNSCore
import Foundation
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
