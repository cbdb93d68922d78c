package import KafkaMessages

/// Which offsets of one lane may be committed, and which of its messages may still start an
/// APNs attempt here: per partition, the lowest offset not yet finished (in flight or given up),
/// or one past the highest offset taken when none is. A message that never finishes (a cancelled
/// delivery, a fenced send) therefore holds its partition's commit back and is redelivered.
///
/// Every message starts under its partition's assignment generation: a number this member gives
/// the partition each time it is assigned. A send may start an attempt only while the partition
/// is still held under that generation and is not being drained for a revocation: a message
/// polled before a revocation belongs to the new owner, even when the partition comes back to
/// this member later (the new owner may have pushed it meanwhile).
package struct OffsetTracker: Sendable {
    private struct PartitionState {
        /// The assignment this state belongs to.
        var generation: UInt64
        /// Messages taken and not yet finished or given up.
        var inFlight: Set<Int64> = []
        /// Messages given up (their sends fenced): not finished, so they hold the commit point
        /// back, but no work of theirs is left here.
        var givenUp: Set<Int64> = []
        /// One past the highest offset taken in this assignment; nil until one is: a partition
        /// assigned and not read from has nothing to commit (committing 0 would rewind it).
        var nextOffset: Int64?
        var committed: Int64?
        /// True from the start of the revocation drain: no attempt starts any more.
        var draining = false

        /// Takes `offset`; false when it was in flight already.
        mutating func start(_ offset: Int64) -> Bool {
            nextOffset = max(nextOffset ?? 0, offset + 1)
            return inFlight.insert(offset).inserted
        }

        /// The offset to commit, when it moved since the last commit.
        var pendingCommit: Int64? {
            guard let nextOffset else { return nil }
            let commitPoint = min(inFlight.min() ?? nextOffset, givenUp.min() ?? nextOffset)
            return commitPoint == committed ? nil : commitPoint
        }
    }

    private var partitions: [KafkaTopicPartition: PartitionState] = [:]
    /// The generation the next assignment gets.
    private var nextGeneration: UInt64 = 1
    /// Messages taken and not yet finished or given up, over all partitions.
    public private(set) var inFlightCount = 0

    public init() {}

    /// Records that `offset` of `partition` was taken for processing; returns the assignment
    /// generation it started under, or nil (nothing recorded) when the partition is not this
    /// member's or is being revoked: the message must not start.
    ///
    /// A partition never announced by ``assign(_:)`` counts as assigned (generation 0): sources
    /// without a rebalance listener (the embedding examples' in-memory ones) own every partition.
    public mutating func start(_ partition: KafkaTopicPartition, offset: Int64) -> UInt64? {
        if partitions[partition] == nil {
            guard !revoked.contains(partition) else { return nil }
            partitions[partition] = PartitionState(generation: 0)
        }
        // Mutated in place: a copy taken out of the dictionary would copy the whole in-flight set
        // on insert (`_NativeSet.copy` in `perf record` of `herald-bench pipeline`).
        guard partitions[partition]?.draining == false else { return nil }
        if partitions[partition]?.start(offset) == true { inFlightCount += 1 }
        return partitions[partition]?.generation
    }

    /// Partitions revoked from this member and not assigned again since.
    private var revoked: Set<KafkaTopicPartition> = []

    /// Whether a message of `partition` started under `generation` may no longer start an APNs
    /// attempt here: the partition was revoked (even if assigned again since) or is being drained.
    public func isFenced(_ partition: KafkaTopicPartition, generation: UInt64) -> Bool {
        guard let state = partitions[partition] else { return true }
        return state.generation != generation || state.draining
    }

    /// Records that these partitions now belong to this member, each under a new generation.
    public mutating func assign(_ assigned: [KafkaTopicPartition]) {
        for partition in assigned {
            revoked.remove(partition)
            partitions[partition] = PartitionState(generation: nextGeneration)
            nextGeneration += 1
        }
    }

    /// How many partitions are assigned to this member now.
    public var assignedCount: Int { partitions.count }

    /// The partitions assigned to this member now, in order.
    public var assignedPartitions: [KafkaTopicPartition] {
        partitions.keys.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
    }

    /// Per assigned partition, the offset last committed (partitions not committed yet are left out).
    public var committedOffsets: [KafkaTopicPartition: Int64] {
        partitions.compactMapValues(\.committed)
    }

    /// Records that every result of `offset` is published; a message of an earlier assignment
    /// of the partition changes nothing. True when this ended a revocation drain's wait.
    @discardableResult
    public mutating func finish(_ partition: KafkaTopicPartition, offset: Int64, generation: UInt64) -> Bool {
        guard partitions[partition]?.generation == generation, partitions[partition]?.inFlight.remove(offset) != nil else { return false }
        inFlightCount -= 1
        return partitions[partition]?.draining == true && partitions[partition]?.inFlight.isEmpty == true
    }

    /// Records that `offset` is given up here (its sends were fenced and none of its work is
    /// left): it holds the commit point back until the partition goes, so the new owner reads it
    /// again, but no longer counts as in flight. True when this ended a revocation drain's wait.
    @discardableResult
    public mutating func giveUp(_ partition: KafkaTopicPartition, offset: Int64, generation: UInt64) -> Bool {
        guard partitions[partition]?.generation == generation, partitions[partition]?.inFlight.remove(offset) != nil else { return false }
        inFlightCount -= 1
        partitions[partition]?.givenUp.insert(offset)
        return partitions[partition]?.draining == true && partitions[partition]?.inFlight.isEmpty == true
    }

    /// The offsets to commit now: only partitions whose commit point moved since the last call
    /// to ``markCommitted(_:)``.
    public func committableOffsets() -> [KafkaTopicPartition: Int64] {
        partitions.compactMapValues(\.pendingCommit)
    }

    /// Messages of `partitions` in flight (neither finished nor given up).
    public func inFlightCount(in partitions: [KafkaTopicPartition]) -> Int {
        partitions.reduce(0) { $0 + (self.partitions[$1]?.inFlight.count ?? 0) }
    }

    /// Starts the revocation drain of `partitions`: from now on no message of theirs starts and
    /// no send of theirs starts an attempt, so what is left to wait for is the requests already
    /// in flight, their ledger writes and their publication. Returns how many messages are left.
    public mutating func beginDrain(_ draining: [KafkaTopicPartition]) -> Int {
        for partition in draining { partitions[partition]?.draining = true }
        return inFlightCount(in: draining)
    }

    /// Forgets revoked partitions and returns the offsets to commit for them before they go.
    /// Messages of theirs still in flight no longer count against the window.
    public mutating func revoke(_ revokedPartitions: [KafkaTopicPartition]) -> [KafkaTopicPartition: Int64] {
        var offsets: [KafkaTopicPartition: Int64] = [:]
        revoked.formUnion(revokedPartitions)
        for partition in revokedPartitions {
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
