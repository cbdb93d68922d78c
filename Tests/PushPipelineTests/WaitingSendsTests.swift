import APNSCore
import PushCore
import PushStores
import FCMCore
import KafkaMessages
import Logging
import PushPipeline
import PushPipelineTesting
import Synchronization
import Testing

/// Sends that wait between attempts (a retry's backoff) where they meet the rebalance drain and
/// the shared send permits: a drain wakes them at once, and a send waiting to be retried after
/// a refusal holds no permit another platform's sends need.
@Suite(.timeLimit(.minutes(1)))
struct WaitingSendsTests {
    /// A backoff of exactly `seconds`: a send that waits it is still waiting when the test looks.
    static func backoff(seconds: Int64) -> Backoff {
        Backoff(initial: .seconds(seconds), maximum: .seconds(seconds), floorPercent: 100)
    }

    /// Retries every 20 s (a send in its backoff stays there), a drain bound of 5 s, quick commits.
    static var waitingConfiguration: PipelineConfiguration {
        var configuration = PipelineConfiguration()
        configuration.retry = RetryPolicy(maxAttempts: 100)
        configuration.retry.backoff = backoff(seconds: 20)
        configuration.revocationDrainTimeout = .seconds(5)
        configuration.commitInterval = .milliseconds(10)
        return configuration
    }

    /// Issue 48, finding 3: a send sleeping in a 429 backoff is given up as soon as its
    /// partition's revocation begins, so the drain does not wait its whole bound for it.
    @Test func aDrainWakesASendSleepingInItsBackoff() async throws {
        let configuration = Self.waitingConfiguration
        let source = InMemoryMessageSource([RevocationFenceTests.request(0)])
        let apns = ScriptedAPNSClient(scripts: [RevocationFenceTests.phone: [.status(429, .tooManyRequests)]], afterwards: .repeatLast)
        let store = try await RevocationFenceTests.store()
        let pipeline = NotificationPipeline(
            configuration: configuration, source: source, publisher: FakePublisher(), store: store, ledger: store, apns: apns,
            logger: Logger(label: "test"))
        try await RevocationFenceTests.whileRunning(pipeline) {
            try await RevocationFenceTests.waitUntil { apns.callCount(RevocationFenceTests.phone) >= 1 }
            try await Task.sleep(for: .milliseconds(50))  // in its backoff now
            let started = ContinuousClock.now
            _ = await RevocationFenceTests.revoke([RevocationFenceTests.partition], from: pipeline)
            let drained = started.duration(to: .now)
            #expect(drained < .seconds(2), "the drain waited \(drained) for a send asleep in its backoff")
            #expect(apns.callCount(RevocationFenceTests.phone) == 1, "no attempt after the revocation began")
        }
    }

    /// A poll batch spans two partitions and one send permit is taken by a send that hangs; the
    /// batch's sends of both partitions wait for it. Revoking the second partition gives its send
    /// up at once: it does not wait behind the first partition's send in one admission queue
    /// (found by the shipped-pipeline simulation: a bulk revocation drained for its whole bound).
    @Test func aDrainGivesUpSendsQueuedBehindAnotherPartitionsSendThatWaitsForAPermit() async throws {
        @Sendable func message(_ event: String, partition: Int32, offset: Int64) -> KafkaMessage {
            let json = #"{"id":"\#(event)","user_ids":["carol"],"topic":"com.example.shop","payload":{"aps":{"alert":"hi"}}}"#
            return KafkaMessage(topic: "push.requests", partition: partition, offset: offset, key: nil, value: Array(json.utf8))
        }
        let phone = RevocationFenceTests.phone
        let held = HoldingAPNSClient(holding: NotificationID.derive(eventID: "held", token: phone))
        let source = InMemoryMessageSource([message("held", partition: 0, offset: 0)])
        var configuration = Self.waitingConfiguration
        configuration.maxConcurrentSends = 1
        let store = try await RevocationFenceTests.store()
        let pipeline = NotificationPipeline(
            configuration: configuration, source: source, publisher: FakePublisher(), store: store, ledger: store, apns: held,
            logger: Logger(label: "test"))
        try await RevocationFenceTests.whileRunning(pipeline) {
            try await RevocationFenceTests.waitUntil { held.isHolding }
            // The next poll batch: a send of partition 0 ahead of one of partition 1, both
            // waiting for the permit the held send has.
            source.append([message("waits", partition: 0, offset: 1), message("revoked", partition: 1, offset: 0)])
            try await Task.sleep(for: .milliseconds(200))
            let started = ContinuousClock.now
            _ = await RevocationFenceTests.revoke([KafkaTopicPartition(topic: "push.requests", partition: 1)], from: pipeline)
            let drained = started.duration(to: .now)
            held.release()
            #expect(drained < .seconds(2), "the drain of partition 1 waited \(drained) behind partition 0's permit wait")
            try await RevocationFenceTests.waitUntil { held.sent.count >= 2 }
            #expect(held.sent.map(\.apnsID) == ["held", "waits"].map { NotificationID.derive(eventID: $0, token: phone) }, "the revoked send never went")
        }
    }

    /// Issue 48, finding 6: with one send permit, an Android send waiting 4 s to retry a 503
    /// does not hold the permit, so an iPhone's send in the same lane goes at once. (The second
    /// 503 comes past the 6 s deadline: the Android device gets `failed`, and the run ends.)
    @Test func aSendWaitingToRetryARefusalHoldsNoPermit() async throws {
        let store = try await NotificationPipelineTests.registeredStore()
        let pixel = AndroidDeliveryTests.pixel
        try await store.apply(
            TokenRegistryUpdate(
                action: .register, userID: "dave", token: pixel, topic: "com.example.shop.android", environment: .production,
                timestamp: Timestamp(millisecondsSince1970: 1_700_000_000_000), platform: .fcm))
        let unavailable = FCMResponse(status: 503, error: FCMErrorBody(code: 503, status: "UNAVAILABLE", errorCode: .unavailable))
        let fcm = AndroidDeliveryTests.ScriptedFCMClient(answers: [pixel: unavailable])
        let android =
            #"{"id":"e-android","user_ids":["dave"],"topic":"com.example.shop","fcm":{"package":"com.example.shop.android","message":{"data":{"k":"v"}}}}"#
        let iphone = #"{"id":"e-iphone","user_ids":["bob"],"topic":"com.example.shop","payload":{"aps":{"alert":"hi"}}}"#
        let source = InMemoryMessageSource([NotificationPipelineTests.request(0, android), NotificationPipelineTests.request(1, iphone)])
        let publisher = FakePublisher()
        var configuration = PipelineConfiguration()
        configuration.retry = RetryPolicy(maxAttempts: 100, deliveryDeadline: .seconds(6))
        configuration.retry.backoff = Self.backoff(seconds: 4)
        configuration.maxConcurrentSends = 1
        configuration.commitInterval = .milliseconds(10)
        let apns = ScriptedAPNSClient()
        let pipeline = NotificationPipeline(
            configuration: configuration, source: source, publisher: publisher, store: store, ledger: store, apns: apns, fcm: fcm,
            logger: Logger(label: "test"))
        try await RevocationFenceTests.whileRunning(pipeline) {
            // However slowly the run starts: the iPhone's send goes before the Android retry's
            // 4 s wait is over, not after it.
            try await RevocationFenceTests.waitUntil { apns.callCount(NotificationPipelineTests.bobPhone) > 0 || fcm.requests.count > 1 }
            #expect(apns.callCount(NotificationPipelineTests.bobPhone) == 1, "the iPhone's send waited for the Android retry's permit")
            #expect(fcm.requests.count == 1, "the Android send is waiting to retry")
            try await RevocationFenceTests.waitUntil { publisher.messages(on: "push.results").count == 2 }
        }
    }
}

/// A lost assignment (the session timed out; the group gave the partition to another member):
/// the partition's sends stop at once, nothing waits for them, and nothing of it is committed.
@Suite(.timeLimit(.minutes(1)))
struct LostAssignmentTests {
    /// Issue 48, finding 2: on today's code a lost partition was drained for up to the bound and
    /// then committed under a dead generation while the new owner worked it.
    @Test func aLostPartitionStopsItsSendsAndCommitsNothing() async throws {
        let configuration = WaitingSendsTests.waitingConfiguration
        let phone = RevocationFenceTests.phone
        let source = InMemoryMessageSource([RevocationFenceTests.request(0), RevocationFenceTests.request(1)])
        let apns = ScriptedAPNSClient(scripts: [phone: [.status(200), .status(429, .tooManyRequests)]], afterwards: .repeatLast)
        let store = try await RevocationFenceTests.store()
        let pipeline = NotificationPipeline(
            configuration: configuration, source: source, publisher: FakePublisher(), store: store, ledger: store, apns: apns,
            logger: Logger(label: "test"))
        try await RevocationFenceTests.whileRunning(pipeline) {
            try await RevocationFenceTests.waitUntil { apns.callCount(phone) >= 2 }  // e0 delivered, e1 in its backoff
            try await Task.sleep(for: .milliseconds(50))
            let commitsBefore = source.allCommits.count
            let started = ContinuousClock.now
            pipeline.partitionsLost([RevocationFenceTests.partition])
            #expect(started.duration(to: .now) < .seconds(1), "a lost partition is not drained")
            try await Task.sleep(for: .milliseconds(200))
            #expect(source.allCommits.count == commitsBefore, "nothing is committed for a lost partition")
            #expect(apns.callCount(phone) == 2, "no attempt after the partition was lost")
        }
    }
}

/// Answers 200 to every request, but holds the one whose apns-id is `holding` until
/// ``release()``: a send that keeps its permit as long as a test wants.
final class HoldingAPNSClient: APNSClientProtocol {
    private let holding: String
    private let state = Mutex<(sent: [APNSRequest], holder: CheckedContinuation<Void, Never>?, released: Bool)>(([], nil, false))

    init(holding apnsID: String) { holding = apnsID }

    func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws -> APNSResponse {
        state.withLock { $0.sent.append(request) }
        if request.apnsID == holding {
            await withCheckedContinuation { continuation in
                let released = state.withLock { state in
                    if !state.released { state.holder = continuation }
                    return state.released
                }
                if released { continuation.resume() }
            }
        }
        return APNSResponse(status: 200, apnsID: request.apnsID)
    }

    /// Whether the held request is waiting.
    var isHolding: Bool { state.withLock { $0.holder != nil } }

    /// Every request received, in order.
    var sent: [APNSRequest] { state.withLock { $0.sent } }

    /// Lets the held request be answered.
    func release() {
        let holder = state.withLock { state in
            state.released = true
            defer { state.holder = nil }
            return state.holder
        }
        holder?.resume()
    }
}
