import Synchronization
package import KafkaMessages

/// Which offsets may be committed: per partition, the lowest offset still in flight, or one past
/// the highest offset taken when nothing is in flight. A message that never finishes (a
/// cancelled delivery) therefore holds its partition's commit back and is redelivered.
///
/// A partition revoked from this member takes no new message until it is assigned again:
/// messages of it that a poll gathered before the revocation belong to the new owner, which
/// reads them again from the committed offset; nothing is committed for it meanwhile.
package struct OffsetTracker: Sendable {
    private struct PartitionState {
        var inFlight: Set<Int64> = []
        var nextOffset: Int64 = 0
        var committed: Int64?

        /// Takes `offset`; false when it was in flight already.
        mutating func start(_ offset: Int64) -> Bool {
            nextOffset = max(nextOffset, offset + 1)
            return inFlight.insert(offset).inserted
        }

        /// The offset to commit, when it moved since the last commit.
        var pendingCommit: Int64? {
            let commitPoint = inFlight.min() ?? nextOffset
            return commitPoint == committed ? nil : commitPoint
        }
    }

    private var partitions: [KafkaTopicPartition: PartitionState] = [:]
    /// Partitions revoked and not assigned again since.
    private var revoked: Set<KafkaTopicPartition> = []
    /// Partitions assigned to this member now.
    private var assigned: Set<KafkaTopicPartition> = []
    /// Messages taken and not yet finished, over all partitions.
    public private(set) var inFlightCount = 0

    public init() {}

    /// Records that `offset` of `partition` was taken for processing; false (and nothing
    /// recorded) when the partition was revoked from this member: the message must not start.
    public mutating func start(_ partition: KafkaTopicPartition, offset: Int64) -> Bool {
        guard !revoked.contains(partition) else { return false }
        // Mutated in place: a copy taken out of the dictionary would copy the whole in-flight set
        // on insert (`_NativeSet.copy` in `perf record` of `herald-bench pipeline`).
        if partitions[partition, default: PartitionState()].start(offset) { inFlightCount += 1 }
        return true
    }

    /// Whether `partition` was revoked from this member and not assigned again since: its
    /// messages are the new owner's, and no new APNs attempt may start for them here.
    public func isRevoked(_ partition: KafkaTopicPartition) -> Bool {
        revoked.contains(partition)
    }

    /// Records that these partitions now belong to this member.
    public mutating func assign(_ assigned: [KafkaTopicPartition]) {
        revoked.subtract(assigned)
        self.assigned.formUnion(assigned)
    }

    /// How many partitions are assigned to this member now.
    public var assignedCount: Int { assigned.count }

    /// Per assigned partition, the offset last committed (partitions not committed yet are left out).
    public var committedOffsets: [KafkaTopicPartition: Int64] {
        var offsets: [KafkaTopicPartition: Int64] = [:]
        for partition in assigned {
            if let committed = partitions[partition]?.committed { offsets[partition] = committed }
        }
        return offsets
    }

    /// Records that every result of `offset` is published.
    public mutating func finish(_ partition: KafkaTopicPartition, offset: Int64) {
        if partitions[partition]?.inFlight.remove(offset) != nil { inFlightCount -= 1 }
    }

    /// The offsets to commit now: only partitions whose commit point moved since the last call
    /// to ``markCommitted(_:)``.
    public func committableOffsets() -> [KafkaTopicPartition: Int64] {
        var offsets: [KafkaTopicPartition: Int64] = [:]
        for (partition, state) in partitions {
            if let commitPoint = state.pendingCommit { offsets[partition] = commitPoint }
        }
        return offsets
    }

    /// Messages of `partitions` taken and not yet finished.
    public func inFlightCount(in partitions: [KafkaTopicPartition]) -> Int {
        partitions.reduce(0) { $0 + (self.partitions[$1]?.inFlight.count ?? 0) }
    }

    /// Forgets revoked partitions and returns the offsets to commit for them before they go.
    /// Messages of theirs still in flight no longer count against the window.
    public mutating func revoke(_ revoked: [KafkaTopicPartition]) -> [KafkaTopicPartition: Int64] {
        var offsets: [KafkaTopicPartition: Int64] = [:]
        self.revoked.formUnion(revoked)
        assigned.subtract(revoked)
        for partition in revoked {
            guard let state = partitions.removeValue(forKey: partition) else { continue }
            inFlightCount -= state.inFlight.count
            if let commitPoint = state.pendingCommit { offsets[partition] = commitPoint }
        }
        return offsets
    }

    /// Records a successful commit.
    public mutating func markCommitted(_ offsets: [KafkaTopicPartition: Int64]) {
        for (partition, offset) in offsets {
            partitions[partition]?.committed = offset
        }
    }
}

/// The offset tracker behind its lock, shared by the consume loop (start, commit, rebalance)
/// and request processing (finish).
final class SharedOffsetTracker: Sendable {
    private let tracker = Mutex(OffsetTracker())

    func withLock<Result: Sendable>(_ body: (inout OffsetTracker) -> Result) -> Result {
        tracker.withLock { body(&$0) }
    }

    /// Whether `message`'s partition was revoked from this member (``OffsetTracker/isRevoked(_:)``).
    func isRevoked(_ message: KafkaMessage) -> Bool {
        tracker.withLock { $0.isRevoked(message.topicPartition) }
    }

    /// Marks a message whose results are all published; its offset may now be committed.
    func finish(_ message: KafkaMessage) {
        tracker.withLock { $0.finish(message.topicPartition, offset: message.offset) }
    }
}
