package import KafkaMessages

/// What librdkafka's rebalance callback reports.
package enum RebalanceCallback: Sendable {
    /// `RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS`.
    case assign
    /// `RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS`.
    case revoke
    /// Any other code: the rebalance failed.
    case error
}

/// One thing the member does for a rebalance callback. The callback performs the steps
/// ``steps(for:assignmentLost:)`` decides, in order; the decision is apart from the C calls so
/// the pipeline's simulation takes the decisions the shipped callback takes.
package enum RebalanceStep: Sendable, Equatable {
    /// Starts the partitions that have no committed offset where the offset seed says.
    case seedUncommittedOffsets
    /// Takes the partitions (incrementally under the cooperative protocol).
    case assign
    /// Tells the listener the partitions are this member's.
    case reportAssigned
    /// Tells the listener the partitions are gone without an orderly revocation: another member
    /// may work them already, so their work stops at once and nothing of theirs is committed.
    case reportLost
    /// Asks the listener to drain the partitions, and commits the offsets it returns.
    case drainAndCommit
    /// Gives the partitions back (incrementally under the cooperative protocol, the whole
    /// assignment under the eager one).
    case unassign
    /// Forgets the group membership and drops the whole assignment.
    case forgetAssignment

    /// The steps for `callback`, in order. `assignmentLost` is `rd_kafka_assignment_lost()`:
    /// a revocation after a session time-out or a fenced member is a loss, never drained or
    /// committed (its commit would carry a dead generation while the new owner already works the
    /// partitions).
    package static func steps(for callback: RebalanceCallback, assignmentLost: Bool) -> [RebalanceStep] {
        switch callback {
        case .assign: [.seedUncommittedOffsets, .assign, .reportAssigned]
        case .revoke where assignmentLost: [.reportLost, .unassign]
        case .revoke: [.drainAndCommit, .unassign]
        case .error: [.reportLost, .forgetAssignment]
        }
    }
}

/// The part of `offsets` a commit carries: the partitions `assigned` to the member when the
/// commit runs. A commit decided before a rebalance may run after it; a revoked partition's
/// offsets were committed by its revocation, and a lost one's new owner commits its own (an
/// older offset from here would move it back).
package func offsetsOfAssignedPartitions(
    _ offsets: [KafkaTopicPartition: Int64],
    assigned: Set<KafkaTopicPartition>
) -> [KafkaTopicPartition: Int64] {
    offsets.filter { assigned.contains($0.key) }
}

/// Where the partitions of an assignment that its group never committed start after an upgrade
/// gave the group's topics a group of their own (``RebalanceStep/seedUncommittedOffsets``): at
/// the offset the earlier group committed, so the upgrade neither reads a retained topic again
/// nor skips it. `committed` holds the group's own committed offsets, a negative one (librdkafka's
/// `RD_KAFKA_OFFSET_INVALID`) standing for none; returns the partitions that start at the earlier
/// group's offset, and where. The others start at their own committed offset, or by
/// `auto.offset.reset` when neither group committed one.
package func seededStartOffsets(
    committed: [KafkaTopicPartition: Int64],
    committedByEarlierGroup earlier: [KafkaTopicPartition: Int64]
) -> [KafkaTopicPartition: Int64] {
    earlier.filter { partition, offset in offset >= 0 && (committed[partition] ?? -1) < 0 }
}
