import KafkaMessages
import APNSCore
import PushStores
import Foundation
import PushPipeline
import PushPipelineTesting
import Synchronization

/// Records what was published; can refuse the first sends to exercise retries, acknowledge
/// the first ones late, or refuse sends with a broker's error.
final class FakePublisher: MessagePublisher {
    private let records = InMemoryMessagePublisher()
    private let failuresLeft: Atomic<Int>
    private let slowSendsLeft: Atomic<Int>
    private let slowSendDelay: Duration
    private let refusal: @Sendable (KafkaOutgoingMessage, Int) -> (any Error)?
    private let attempts = Atomic(0)

    /// `refusing(message, attempt)` returns the error a send fails with (`attempt` counts every
    /// send so far, from 1), or nil to accept it.
    init(
        failFirst failures: Int = 0,
        acknowledgeFirst slowSends: Int = 0,
        after delay: Duration = .zero,
        refusing: @escaping @Sendable (KafkaOutgoingMessage, Int) -> (any Error)? = { _, _ in nil }
    ) {
        failuresLeft = Atomic(failures)
        slowSendsLeft = Atomic(slowSends)
        slowSendDelay = delay
        refusal = refusing
    }

    func send(_ message: KafkaOutgoingMessage) async throws {
        let attempt = attempts.add(1, ordering: .relaxed).newValue
        if failuresLeft.subtract(1, ordering: .relaxed).newValue >= 0 {
            throw FakeError.unavailable
        }
        if let error = refusal(message, attempt) { throw error }
        if slowSendsLeft.subtract(1, ordering: .relaxed).newValue >= 0 {
            // Like a broker that acknowledges late: the record is written whatever the caller does.
            let milliseconds = Int(slowSendDelay / .milliseconds(1))
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { continuation.resume() }
            }
        }
        try await records.send(message)
    }

    func messages(on topic: String) -> [KafkaOutgoingMessage] {
        records.messages(on: topic)
    }

    func jsonObjects(on topic: String) -> [[String: Any]] {
        messages(on: topic).compactMap { message in
            message.value.flatMap { try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] }
        }
    }
}

enum FakeError: Error {
    case unavailable
}

/// PushPipelineTesting's registry and ledger, whose first lookups or ledger writes fail or hang.
final class FakeStore: DeviceTokenStore, DeliveryLedger {
    private let registry = InMemoryTokenRegistry()
    private let lookupFailuresLeft: Atomic<Int>
    private let lookupHangsLeft: Atomic<Int>
    private let recordFailuresLeft: Atomic<Int>
    private let recordHangsLeft: Atomic<Int>
    /// Where each lookup and ledger write ran, as `placeOfCall` judged it (none without one).
    private let placesOfCalls = Mutex<[Bool]>([])
    private let placeOfCall: (@Sendable () -> Bool)?

    /// The first `failures` lookups throw; the `hangs` after them never answer, even when
    /// cancelled. Likewise for ledger writes. `placeOfCall`, when given, is asked at each lookup
    /// and ledger write (``placesOfCalls``).
    init(
        failFirstLookups failures: Int = 0,
        hangFirstLookups hangs: Int = 0,
        failFirstRecords: Int = 0,
        hangFirstRecords: Int = 0,
        placeOfCall: (@Sendable () -> Bool)? = nil
    ) {
        self.placeOfCall = placeOfCall
        lookupFailuresLeft = Atomic(failures)
        lookupHangsLeft = Atomic(hangs)
        recordFailuresLeft = Atomic(failFirstRecords)
        recordHangsLeft = Atomic(hangFirstRecords)
    }

    /// What `placeOfCall` answered at each lookup and ledger write, in order.
    var callPlaces: [Bool] { placesOfCalls.withLock { $0 } }

    private func notePlace() {
        guard let placeOfCall else { return }
        let place = placeOfCall()
        placesOfCalls.withLock { $0.append(place) }
    }

    func activeDevices(apnsTopic: String?, fcmPackage: String?, webPushApp: String?, userIDs: [String]) async throws -> [String: [DeviceToken]] {
        notePlace()
        try await Self.inject(failures: lookupFailuresLeft, hangs: lookupHangsLeft)
        return try await registry.activeDevices(apnsTopic: apnsTopic, fcmPackage: fcmPackage, webPushApp: webPushApp, userIDs: userIDs)
    }

    @discardableResult
    func apply(_ update: TokenRegistryUpdate) async throws -> Bool {
        try await registry.apply(update)
    }

    func markUnregistered(topic: String, token: String, at time: Timestamp) async throws -> Bool {
        try await registry.markUnregistered(topic: topic, token: token, at: time)
    }

    func recordedDeliveries(of events: [LedgerEvent]) async throws -> [LedgerEvent: [LedgerTarget: RecordedDelivery]] {
        notePlace()
        return try await registry.recordedDeliveries(of: events)
    }

    func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery] {
        notePlace()
        try await Self.inject(failures: recordFailuresLeft, hangs: recordHangsLeft)
        guard recordsADayEarlier.load(ordering: .relaxed) else { return try await registry.record(batch) }
        // As if written before a UTC midnight that has passed since: under the day before.
        return try await registry.record(
            batch.map { entry in
                var delivery = entry.delivery
                delivery.event.day -= 1
                return (delivery, entry.mark)
            }
        )
    }

    /// While true, ledger writes land under the day before theirs: a first delivery before a UTC
    /// midnight, seen from a redelivery after it.
    let recordsADayEarlier = Atomic(false)

    var recordedCount: Int { registry.recordedCount }

    /// Every batch the ledger wrote, oldest first.
    var recordedBatches: [[RecordedDelivery]] { registry.recordedBatches }

    /// Throws while `failures` last, then never returns while `hangs` last.
    private static func inject(failures: borrowing Atomic<Int>, hangs: borrowing Atomic<Int>) async throws {
        if failures.subtract(1, ordering: .relaxed).newValue >= 0 { throw FakeError.unavailable }
        if hangs.subtract(1, ordering: .relaxed).newValue >= 0 {
            // Like a query on a connection that died mid-transaction: never answers, deaf to cancellation.
            await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
        }
    }
}

/// A publisher's error as a broker client reports it: whether a retry can succeed, and why.
struct FakePublishError: PublishError {
    var cause: String?
    var isRetriable: Bool
    var isRecordTooLarge = false
    var message: String { "refused: \(cause ?? "unknown")" }
}

/// Runs the jobs of the tasks that prefer it on a serial dispatch queue of its own, so a test
/// can tell whether code ran there (``isCurrent``).
final class QueueTaskExecutor: TaskExecutor {
    private let queue = DispatchQueue(label: "test.task-executor")
    private let marker = DispatchSpecificKey<Bool>()
    /// Jobs run so far.
    let jobsRun = Atomic(0)

    init() {
        queue.setSpecific(key: marker, value: true)
    }

    /// Whether the calling code runs on this executor's queue.
    var isCurrent: Bool { DispatchQueue.getSpecific(key: marker) == true }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async {
            self.jobsRun.add(1, ordering: .relaxed)
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
