import PushStores
import PushCore
import APNSCore
import PushPipeline
import PushPipelineTesting
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(1)))
struct RetryingSenderTests {
    static func request(_ token: String, expiration: Int64? = nil) -> APNSRequest {
        APNSRequest(
            deviceToken: token,
            topic: "com.example.shop",
            pushType: .alert,
            priority: .immediate,
            apnsID: "6f1c2d3e-4a5b-5c6d-8e7f-8091a2b3c4d5",
            expiration: expiration,
            payload: Array(#"{"aps":{}}"#.utf8)
        )
    }

    static let fastPolicy = RetryPolicy(
        maxAttempts: 5,
        deliveryDeadline: .seconds(30),
        requestTimeout: .seconds(1),
        initialBackoff: .milliseconds(2),
        maximumBackoff: .milliseconds(20),
        loadShedding: .disabled
    )

    @Test func retriesUntilDeliveredAndReportsAttempts() async throws {
        let client = ScriptedAPNSClient(
            scripts: [
                "aa": [.status(503, .serviceUnavailable), .status(429, .tooManyRequests), .status(500), .status(200)]
            ], afterwards: .repeatLast)
        let sender = RetryingSender(client: client, policy: Self.fastPolicy)
        let outcome = try await sender.deliver(Self.request("aa"), environment: .production, consumedAt: .now)
        #expect(outcome == DeliveryOutcome(status: .delivered, apnsStatus: 200, reason: nil, attempts: 4))
    }

    @Test func finalAnswersAreNotRetried() async throws {
        let client = ScriptedAPNSClient(
            scripts: [
                "bad": [.status(400, .badDeviceToken)],
                "gone": [.status(410, .unregistered, timestamp: 1_700_000_000_123)],
                "big": [.status(413, .payloadTooLarge)],
            ], afterwards: .repeatLast)
        let sender = RetryingSender(client: client, policy: Self.fastPolicy)
        let bad = try await sender.deliver(Self.request("bad"), environment: .production, consumedAt: .now)
        #expect(bad == DeliveryOutcome(status: .rejected, apnsStatus: 400, reason: "BadDeviceToken", attempts: 1))
        let gone = try await sender.deliver(Self.request("gone"), environment: .production, consumedAt: .now)
        #expect(gone.status == .unregistered)
        #expect(gone.unregisteredAtMilliseconds == 1_700_000_000_123)
        let big = try await sender.deliver(Self.request("big"), environment: .production, consumedAt: .now)
        #expect(big.status == .rejected)
        #expect(client.callCount("bad") + client.callCount("gone") + client.callCount("big") == 3)
    }

    @Test func attemptsAreBounded() async throws {
        let client = ScriptedAPNSClient(scripts: ["busy": [.status(503, .serviceUnavailable)]], afterwards: .repeatLast)
        let sender = RetryingSender(client: client, policy: Self.fastPolicy)
        let outcome = try await sender.deliver(Self.request("busy"), environment: .production, consumedAt: .now)
        #expect(outcome == DeliveryOutcome(status: .failed, apnsStatus: 503, reason: "ServiceUnavailable", attempts: 5))
        #expect(client.callCount("busy") == 5)
    }

    @Test func aClosedFenceStopsTheNextAttemptAndTheFirst() async throws {
        let client = ScriptedAPNSClient(scripts: ["busy": [.status(503, .serviceUnavailable)], "late": [.status(200)]], afterwards: .repeatLast)
        let sender = RetryingSender(client: client, policy: Self.fastPolicy)
        // Open for the first two attempts, closed before the third.
        await #expect(throws: DeliveryStopped.fenced) {
            try await sender.deliver(Self.request("busy"), environment: .production, consumedAt: .now, fence: .checking { client.callCount("busy") >= 2 })
        }
        #expect(client.callCount("busy") == 2, "no attempt after the fence closed")
        await #expect(throws: DeliveryStopped.fenced) {
            try await sender.deliver(Self.request("late"), environment: .production, consumedAt: .now, fence: .checking { true })
        }
        #expect(client.callCount("late") == 0)
    }

    @Test func timeIsBoundedByTheDeliveryDeadline() async throws {
        let client = ScriptedAPNSClient(scripts: ["slow": [.transport(.connectionFailed("refused"))]], afterwards: .repeatLast)
        var policy = Self.fastPolicy
        policy.maxAttempts = 1000
        policy.deliveryDeadline = .seconds(1)
        policy.maximumBackoff = .milliseconds(50)
        let sender = RetryingSender(client: client, policy: policy)
        let started = ContinuousClock.now
        let outcome = try await sender.deliver(Self.request("slow"), environment: .production, consumedAt: started)
        #expect(outcome.status == .failed)
        #expect(outcome.apnsStatus == nil)
        #expect(outcome.reason == "ConnectionFailed", "the last attempt's transport cause")
        #expect(outcome.attempts < policy.maxAttempts, "the deadline ended the attempts, not their bound")
        // The attempts' bound would take about 50 s; the deadline ends it after 1 s (the margin
        // is for a loaded machine: a parallel `swift test`).
        #expect(started.duration(to: .now) < .seconds(3))

        // A message consumed longer ago than the deadline gets no attempt at all.
        let late = try await sender.deliver(
            Self.request("slow"),
            environment: .production,
            consumedAt: .now - .seconds(1)
        )
        #expect(late == DeliveryOutcome(status: .failed, apnsStatus: nil, reason: nil, attempts: 0))
    }

    @Test func aFailureWithoutAnAPNsAnswerNamesTheTransportCause() async throws {
        let causes: [(TransportError, String)] = [
            (.connectionFailed("refused"), "ConnectionFailed"),
            (.tlsHandshakeFailed("unknown CA"), "TLSHandshakeFailed"),
            (.deadlineExceeded(), "Timeout"),
            (.streamReset("REFUSED_STREAM"), "StreamReset"),
        ]
        var policy = Self.fastPolicy
        policy.maxAttempts = 2
        for (error, reason) in causes {
            // An APNs answer first, then no answer: the result names the last attempt's cause.
            let client = ScriptedAPNSClient(scripts: ["aa": [.status(503, .serviceUnavailable), .transport(error)]], afterwards: .repeatLast)
            let outcome = try await RetryingSender(client: client, policy: policy)
                .deliver(Self.request("aa"), environment: .production, consumedAt: .now)
            #expect(outcome == DeliveryOutcome(status: .failed, apnsStatus: nil, reason: reason, attempts: 2))
        }
    }

    @Test func expirationGivesExpiredNotFailed() async throws {
        let nowMillis: Int64 = 1_800_000_000_000
        let started = ContinuousClock.now
        // A wall clock that starts at nowMillis and runs in real time.
        let epochMilliseconds: @Sendable () -> Int64 = {
            let elapsed = started.duration(to: .now).components
            return nowMillis + elapsed.seconds * 1000 + elapsed.attoseconds / 1_000_000_000_000_000
        }
        let client = ScriptedAPNSClient(scripts: ["aa": [.status(503, .serviceUnavailable)]], afterwards: .repeatLast)
        var policy = Self.fastPolicy
        policy.maxAttempts = 12
        policy.initialBackoff = .seconds(5)
        policy.maximumBackoff = .seconds(5)
        let sender = RetryingSender(client: client, policy: policy, epochMilliseconds: epochMilliseconds)

        // Already past: never sent.
        let past = try await sender.deliver(
            Self.request("aa", expiration: nowMillis / 1000 - 1),
            environment: .production,
            consumedAt: .now
        )
        #expect(past == DeliveryOutcome(status: .expired, apnsStatus: nil, reason: nil, attempts: 0))
        #expect(client.callCount("aa") == 0)

        // Expires in 1 s, the first attempt fails and every backoff ceiling is 5 s: a wait that
        // would overshoot the expiration gives `expired` at once; shorter ones retry until one does.
        let soon = try await sender.deliver(
            Self.request("aa", expiration: nowMillis / 1000 + 1),
            environment: .production,
            consumedAt: .now
        )
        #expect(soon.status == .expired)
        #expect(soon.apnsStatus == 503)
        #expect(soon.attempts >= 1)

        // Expiration 0 means "deliver once, do not store": it never expires in Herald.
        let client200 = ScriptedAPNSClient(scripts: [:], afterwards: .repeatLast)
        let zero = try await RetryingSender(client: client200, policy: policy, epochMilliseconds: epochMilliseconds)
            .deliver(Self.request("bb", expiration: 0), environment: .production, consumedAt: .now)
        #expect(zero.status == .delivered)
    }

    @Test func tooManyRequestsForOneTokenDoesNotSlowOthers() async throws {
        let client = ScriptedAPNSClient(scripts: ["hot": [.status(429, .tooManyRequests)]], afterwards: .repeatLast)
        var policy = Self.fastPolicy
        policy.maxAttempts = 4
        policy.initialBackoff = .milliseconds(200)
        policy.maximumBackoff = .milliseconds(200)
        policy.loadShedding = LoadSheddingPolicy(initialPause: .seconds(1), maximumPause: .seconds(1))
        let sender = RetryingSender(client: client, policy: policy)
        async let hot = sender.deliver(Self.request("hot"), environment: .production, consumedAt: .now)
        try await Task.sleep(for: .milliseconds(50))
        #expect(sender.loadSheddingPause == .zero)

        let started = ContinuousClock.now
        for index in 0..<20 {
            let outcome = try await sender.deliver(Self.request("cold\(index)"), environment: .production, consumedAt: .now)
            #expect(outcome.status == .delivered)
            #expect(outcome.attempts == 1)
        }
        #expect(started.duration(to: .now) < .milliseconds(500))
        let hotOutcome = try await hot
        #expect(hotOutcome == DeliveryOutcome(status: .failed, apnsStatus: 429, reason: "TooManyRequests", attempts: 4))
        #expect(sender.loadSheddingPause == .zero)
    }

    @Test func serviceUnavailableSlowsTheWholeSender() async throws {
        let client = ScriptedAPNSClient(scripts: ["sick": [.status(503, .serviceUnavailable), .status(200)]], afterwards: .repeatLast)
        var policy = Self.fastPolicy
        policy.loadShedding = LoadSheddingPolicy(
            initialPause: .milliseconds(400),
            maximumPause: .seconds(2),
            halfLife: .seconds(30)
        )
        let sender = RetryingSender(client: client, policy: policy)
        let sick = try await sender.deliver(Self.request("sick"), environment: .production, consumedAt: .now)
        #expect(sick.status == .delivered)
        #expect(sick.attempts == 2)
        #expect(sender.loadSheddingPause > .milliseconds(300))

        // Another device's first attempt now waits at least half the shared pause.
        let started = ContinuousClock.now
        let other = try await sender.deliver(Self.request("other"), environment: .production, consumedAt: .now)
        #expect(other.status == .delivered)
        #expect(started.duration(to: .now) >= .milliseconds(150))
    }

    @Test func lostConnectionsSlowTheSenderButRefusedStreamsDoNot() async throws {
        let client = ScriptedAPNSClient(
            scripts: [
                "refused": [.transport(.streamReset("GOAWAY")), .status(200)],
                "lost": [.transport(.connectionFailed("reset by peer")), .status(200)],
            ], afterwards: .repeatLast)
        var policy = Self.fastPolicy
        policy.loadShedding = LoadSheddingPolicy(initialPause: .milliseconds(100), halfLife: .seconds(30))
        let sender = RetryingSender(client: client, policy: policy)

        let refused = try await sender.deliver(Self.request("refused"), environment: .production, consumedAt: .now)
        #expect(refused.status == .delivered)
        #expect(refused.attempts == 2)
        #expect(sender.loadSheddingPause == .zero)

        let lost = try await sender.deliver(Self.request("lost"), environment: .production, consumedAt: .now)
        #expect(lost.status == .delivered)
        #expect(lost.attempts == 2)
        #expect(sender.loadSheddingPause > .zero)
    }

    @Test func cancellationThrows() async throws {
        let client = ScriptedAPNSClient(scripts: ["busy": [.status(503)]], afterwards: .repeatLast)
        var policy = Self.fastPolicy
        policy.initialBackoff = .seconds(10)
        policy.maximumBackoff = .seconds(10)
        let sender = RetryingSender(client: client, policy: policy)
        let started = ContinuousClock.now
        await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await #expect(throws: DeliveryStopped.cancelled) {
                    _ = try await sender.deliver(Self.request("busy"), environment: .production, consumedAt: .now)
                }
            }
            try? await Task.sleep(for: .milliseconds(50))
            group.cancelAll()
        }
        #expect(started.duration(to: .now) < .seconds(5))
    }
}
