import KafkaMessages
import APNSCore
import DeviceTokenStore
import Foundation
import PushPipeline
import Synchronization

/// Hands out a fixed list of messages once and records commits; can revoke partitions in the
/// middle of the first poll, as librdkafka's rebalance callback may.
final class FakeSource: MessageSource {
    private let pending: Mutex<[KafkaMessage]>
    private let commits = Mutex<[[KafkaTopicPartition: Int64]]>([])
    private let listener = Mutex<(any KafkaRebalanceListener)?>(nil)
    private let revokeDuringFirstPoll: Mutex<[KafkaTopicPartition]>

    init(_ messages: [KafkaMessage], revokingDuringFirstPoll revoked: [KafkaTopicPartition] = []) {
        pending = Mutex(messages)
        revokeDuringFirstPoll = Mutex(revoked)
    }

    func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage] {
        let batch = pending.withLock { messages in
            let batch = Array(messages.prefix(maxMessages))
            messages.removeFirst(batch.count)
            return batch
        }
        let revoked = revokeDuringFirstPoll.withLock { revoked in
            defer { revoked = [] }
            return revoked
        }
        if !revoked.isEmpty, let listener = listener.withLock({ $0 }) {
            // The batch was gathered before the revocation, as in one rd_kafka_consumer_poll loop.
            let offsets = listener.partitionsRevoked(revoked)
            if !offsets.isEmpty { commits.withLock { $0.append(offsets) } }
        }
        if batch.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        return batch
    }

    func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws {
        commits.withLock { $0.append(offsets) }
    }

    /// Every commit, oldest first.
    var allCommits: [[KafkaTopicPartition: Int64]] { commits.withLock { $0 } }

    func setRebalanceListener(_ listener: any KafkaRebalanceListener) {
        self.listener.withLock { $0 = listener }
    }
    func pauseAll() async throws {}
    func resumeAll() async throws {}

    /// The last committed offset per partition.
    var committed: [KafkaTopicPartition: Int64] {
        commits.withLock { $0.reduce(into: [:]) { merged, commit in merged.merge(commit) { _, new in new } } }
    }
}

/// Records what was published; can refuse the first sends to exercise retries, acknowledge
/// the first ones late, or refuse sends with a broker's error.
final class FakePublisher: MessagePublisher {
    private let sent = Mutex<[KafkaOutgoingMessage]>([])
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
        sent.withLock { $0.append(message) }
    }

    func messages(on topic: String) -> [KafkaOutgoingMessage] {
        sent.withLock { $0.filter { $0.topic == topic } }
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

/// An in-memory registry and ledger following the same rules as PostgreSQL's.
final class FakeStore: DeviceTokenStore, DeliveryLedger {
    private struct Row {
        var userID: String
        var environment: APNSEnvironment
        var registeredAt: Timestamp
        var unregisteredAt: Timestamp?
    }

    private let rows = Mutex<[String: Row]>([:])
    private let deliveries = Mutex<[String: RecordedDelivery]>([:])
    private let lookupFailuresLeft: Atomic<Int>
    private let lookupHangsLeft: Atomic<Int>
    private let recordFailuresLeft: Atomic<Int>
    private let recordHangsLeft: Atomic<Int>
    private let writtenBatches = Mutex<[[RecordedDelivery]]>([])

    /// The first `failures` lookups throw; the `hangs` after them never answer, even when
    /// cancelled. Likewise for ledger writes.
    init(failFirstLookups failures: Int = 0, hangFirstLookups hangs: Int = 0, failFirstRecords: Int = 0, hangFirstRecords: Int = 0) {
        lookupFailuresLeft = Atomic(failures)
        lookupHangsLeft = Atomic(hangs)
        recordFailuresLeft = Atomic(failFirstRecords)
        recordHangsLeft = Atomic(hangFirstRecords)
    }

    func activeTokens(topic: String, userIDs: [String], environment: APNSEnvironment?) async throws -> [String: [DeviceToken]] {
        if lookupFailuresLeft.subtract(1, ordering: .relaxed).newValue >= 0 { throw FakeError.unavailable }
        if lookupHangsLeft.subtract(1, ordering: .relaxed).newValue >= 0 {
            // Like a query on a connection that died mid-transaction: never answers, deaf to cancellation.
            await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
        }
        return rows.withLock { rows in
            var result: [String: [DeviceToken]] = [:]
            for (key, row) in rows.sorted(by: { $0.key < $1.key }) where row.unregisteredAt == nil {
                let parts = key.split(separator: "|")
                guard String(parts[0]) == topic, userIDs.contains(row.userID),
                    environment == nil || environment == row.environment
                else { continue }
                result[row.userID, default: []].append(DeviceToken(userID: row.userID, token: String(parts[1]), environment: row.environment))
            }
            return result
        }
    }

    @discardableResult
    func apply(_ update: TokenRegistryUpdate) async throws -> Bool {
        switch update.action {
        case .register:
            return rows.withLock { rows in
                let key = "\(update.topic)|\(update.token)"
                if let row = rows[key], !(update.timestamp > row.registeredAt && (row.unregisteredAt.map { update.timestamp > $0 } ?? true)) {
                    return false
                }
                rows[key] = Row(userID: update.userID ?? "", environment: update.environment, registeredAt: update.timestamp)
                return true
            }
        case .unregister:
            return try await markUnregistered(topic: update.topic, token: update.token, at: update.timestamp)
        }
    }

    func markUnregistered(topic: String, token: String, at time: Timestamp) async throws -> Bool {
        rows.withLock { rows in
            let key = "\(topic)|\(token)"
            guard var row = rows[key], time > row.registeredAt, row.unregisteredAt.map({ time > $0 }) ?? true else { return false }
            row.unregisteredAt = time
            rows[key] = row
            return true
        }
    }
}

extension FakeStore {
    func recordedDeliveries(of events: [LedgerEvent]) async throws -> [LedgerEvent: [String: RecordedDelivery]] {
        deliveries.withLock { deliveries in
            var result: [LedgerEvent: [String: RecordedDelivery]] = [:]
            for delivery in deliveries.values where events.contains(delivery.event) {
                result[delivery.event, default: [:]][delivery.token] = delivery
            }
            return result
        }
    }

    func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery] {
        if recordFailuresLeft.subtract(1, ordering: .relaxed).newValue >= 0 { throw FakeError.unavailable }
        if recordHangsLeft.subtract(1, ordering: .relaxed).newValue >= 0 {
            await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
        }
        writtenBatches.withLock { $0.append(batch.map(\.delivery)) }
        var standing: [RecordedDelivery] = []
        for (delivery, mark) in batch {
            var stored = delivery
            if let mark {
                let marked = try await markUnregistered(topic: mark.topic, token: mark.token, at: mark.at)
                if !marked { stored.unregisteredAtMilliseconds = nil }
            } else {
                stored.unregisteredAtMilliseconds = nil
            }
            standing.append(
                deliveries.withLock { deliveries in
                    let key = "\(delivery.event.topic)/\(delivery.event.eventID)/\(delivery.event.day)/\(delivery.token)"
                    if let existing = deliveries[key] { return existing }
                    deliveries[key] = stored
                    return stored
                }
            )
        }
        return standing
    }

    var recordedCount: Int { deliveries.withLock { $0.count } }

    /// Every batch the ledger wrote, oldest first.
    var recordedBatches: [[RecordedDelivery]] { writtenBatches.withLock { $0 } }
}

/// Answers from a script per token and records every request.
final class FakeAPNS: APNSClientProtocol {
    private let scripts: Mutex<[String: [APNSResponse]]>
    private let requests = Mutex<[(APNSRequest, APNSEnvironment)]>([])

    /// `scripts[token]` is the sequence of answers; after it runs out, 200.
    init(scripts: [String: [APNSResponse]] = [:]) {
        self.scripts = Mutex(scripts)
    }

    func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws -> APNSResponse {
        requests.withLock { $0.append((request, environment)) }
        let scripted = scripts.withLock { scripts -> APNSResponse? in
            guard var answers = scripts[request.deviceToken], !answers.isEmpty else { return nil }
            let answer = answers.removeFirst()
            scripts[request.deviceToken] = answers
            return answer
        }
        return scripted ?? APNSResponse(status: 200, apnsID: request.apnsID)
    }

    var sent: [(APNSRequest, APNSEnvironment)] { requests.withLock { $0 } }
}

/// A publisher's error as a broker client reports it: whether a retry can succeed, and why.
struct FakePublishError: PublishError {
    var cause: String?
    var isRetriable: Bool
    var isRecordTooLarge = false
    var message: String { "refused: \(cause ?? "unknown")" }
}
