public import KafkaMessages
public import PushPipeline
import Synchronization

/// A ``MessageSource`` over messages held in memory: hands each out once, in order, and records
/// every commit. It can revoke partitions in the middle of the next poll, as librdkafka's
/// rebalance callback may, to test what the pipeline does then.
public final class InMemoryMessageSource: MessageSource {
    private let pending: Mutex<[KafkaMessage]>
    private let commits = Mutex<[[KafkaTopicPartition: Int64]]>([])
    private let listener = Mutex<(any KafkaRebalanceListener)?>(nil)
    private let revokeDuringNextPoll: Mutex<[KafkaTopicPartition]>
    private let left = Mutex(false)

    /// `messages` are handed out first to last; `revoked` partitions are revoked during the
    /// first poll (after it gathered its batch), their offsets committed as the pipeline asks.
    public init(_ messages: [KafkaMessage] = [], revokingDuringFirstPoll revoked: [KafkaTopicPartition] = []) {
        pending = Mutex(messages)
        revokeDuringNextPoll = Mutex(revoked)
    }

    /// Queues more messages behind the ones not yet handed out.
    public func append(_ messages: [KafkaMessage]) {
        pending.withLock { $0 += messages }
    }

    /// Up to `maxMessages` of the pending messages; with none, waits a little (at most 5 ms of
    /// `timeout`) and returns none.
    public func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage] {
        let batch = pending.withLock { messages in
            let batch = Array(messages.prefix(maxMessages))
            messages.removeFirst(batch.count)
            return batch
        }
        let revoked = revokeDuringNextPoll.withLock { revoked in
            defer { revoked = [] }
            return revoked
        }
        if !revoked.isEmpty, let listener = listener.withLock({ $0 }) {
            // The batch was gathered before the revocation, as in one rd_kafka_consumer_poll loop.
            let offsets = listener.partitionsRevoked(revoked)
            if !offsets.isEmpty { commits.withLock { $0.append(offsets) } }
        }
        if batch.isEmpty { try await Task.sleep(for: min(timeout, .milliseconds(5))) }
        return batch
    }

    public func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws {
        commits.withLock { $0.append(offsets) }
    }

    /// Every commit, oldest first.
    public var allCommits: [[KafkaTopicPartition: Int64]] { commits.withLock { $0 } }

    /// The last committed offset per partition.
    public var committed: [KafkaTopicPartition: Int64] {
        commits.withLock { $0.reduce(into: [:]) { merged, commit in merged.merge(commit) { _, new in new } } }
    }

    public func setRebalanceListener(_ listener: any KafkaRebalanceListener) {
        self.listener.withLock { $0 = listener }
    }

    /// Whether the pipeline left the group (``leaveGroup()``).
    public var hasLeftGroup: Bool { left.withLock { $0 } }

    public func leaveGroup() async {
        left.withLock { $0 = true }
    }

    public func pauseAll() async throws {}
    public func resumeAll() async throws {}
}
