import KafkaMessages

extension DeliveryCoordinator {
    /// One lane's part of the state machine, as a value: its offsets (``OffsetTracker``: the
    /// messages in flight, the generation each started under, the fences, the revocation drains,
    /// the commit point), where its member stands in its life, and its consume loop waiting for
    /// room in the window. Each event of the lane is one mutating call that returns what to wake;
    /// ``StateMachine`` holds one per lane beside what the lanes share (the send permits, the
    /// claims, the outcomes on their way to the ledger).
    struct LaneState<Waiter> {
        private(set) var offsets = OffsetTracker()
        private(set) var lifecycle = Lifecycle.running
        /// The consume loop, waiting for at most `atMost` messages in flight.
        private var roomWaiter: (atMost: Int, waiter: Waiter)?

        /// Whether the consume loop waits for room.
        var isWaitingForRoom: Bool { roomWaiter != nil }

        /// Starts a polled message: the generation it starts under, or nil (nothing recorded)
        /// when its partition is not this member's or is being drained, or the lane is stopping.
        mutating func start(_ message: KafkaMessage) -> UInt64? {
            guard lifecycle == .running else { return nil }
            return offsets.start(message.topicPartition, offset: message.offset)
        }

        /// `partitions` are this member's now, each under a new generation.
        mutating func assign(_ partitions: [KafkaTopicPartition]) { offsets.assign(partitions) }

        /// Begins the revocation drain of `partitions`; returns how many of their messages are in flight.
        mutating func beginDrain(_ partitions: [KafkaTopicPartition]) -> Int { offsets.beginDrain(partitions) }

        /// A graceful stop begins: nothing starts from now on; with `givingUpUnstarted` every
        /// partition held is drained as if revoked. Returns the consume loop waiting for room,
        /// to wake so it sees the stop.
        mutating func beginStop(givingUpUnstarted: Bool) -> Waiter? {
            lifecycle = .stopping
            if givingUpUnstarted { _ = offsets.beginDrain(offsets.assignedPartitions) }
            defer { roomWaiter = nil }
            return roomWaiter?.waiter
        }

        /// The member left its group.
        mutating func left() { lifecycle = .stopped }

        /// Registers the consume loop until at most `atMost` messages are in flight; false
        /// (nothing registered) when that is so already.
        mutating func waitForRoom(atMost: Int, _ waiter: Waiter) -> Bool {
            guard offsets.inFlightCount > atMost else { return false }
            roomWaiter = (atMost, waiter)
            return true
        }

        /// Stops the wait for room (its patience ran out, or it was cancelled): its waiter.
        mutating func cancelRoomWait() -> Waiter? {
            defer { roomWaiter = nil }
            return roomWaiter?.waiter
        }

        /// Every result of the message at `position` is published (or, `givenUp`, the message
        /// is left to the partition's next owner); returns whether a drain ended with it, and
        /// the consume loop to wake when the room it waits for is made.
        mutating func settle(_ position: MessagePosition, givenUp: Bool) -> (drainEnded: Bool, room: Waiter?) {
            let (partition, offset, generation) = (position.partition, position.offset, position.generation)
            let drainEnded =
                givenUp
                ? offsets.giveUp(partition, offset: offset, generation: generation)
                : offsets.finish(partition, offset: offset, generation: generation)
            return (drainEnded, wakeIfRoom())
        }

        /// Forgets revoked partitions; returns the offsets to commit for them before they go, and
        /// the consume loop to wake when the room so made is what it waits for.
        mutating func revoke(_ partitions: [KafkaTopicPartition]) -> (offsets: [KafkaTopicPartition: Int64], room: Waiter?) {
            let commit = offsets.revoke(partitions)
            return (commit, wakeIfRoom())
        }

        /// Records a successful commit.
        mutating func markCommitted(_ committed: [KafkaTopicPartition: Int64]) { offsets.markCommitted(committed) }

        private mutating func wakeIfRoom() -> Waiter? {
            guard let room = roomWaiter, offsets.inFlightCount <= room.atMost else { return nil }
            roomWaiter = nil
            return room.waiter
        }
    }
}
