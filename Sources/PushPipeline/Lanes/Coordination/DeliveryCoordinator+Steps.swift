/// What the state machine's steps hand back and take.
extension DeliveryCoordinator.StateMachine {
    /// What the caller does next, outside the lock.
    struct Actions {
        /// Waiters to resume: permits handed to them, claims settled, room made in a lane's
        /// window.
        var resume: [Waiter] = []
        /// Indexes, into the results given to ``published(_:)``, of those that were the last
        /// result of their message, and whether that message was given up (a send of it was
        /// fenced: its new owner delivers it) rather than finished. Its offset is settled already.
        var finished: [(index: Int, givenUp: Bool)] = []
        /// Lanes whose revocation drain has nothing left to wait for now.
        var drained: [DeliveryCoordinator.Lane] = []

        /// Adds the wake-ups and drain ends of `other`.
        mutating func append(_ other: Actions) {
            resume += other.resume
            drained += other.drained.filter { !drained.contains($0) }
        }
    }

    /// How one send of a resolved poll batch goes on (``resolved(_:results:sends:lane:paced:)``).
    enum SendStep: Equatable {
        /// Claimed, and a permit taken for it: send it now.
        case send
        /// Claimed; no permit was free for it, or its lane is paced: admit it (pace, permit), then send.
        case admit
        /// Recorded lately by a copy of its event: republish what the ledger holds.
        case republish
        /// A copy of its event is sending it: wait until that claim is settled.
        case waitForClaim
        /// Its message was fenced before it could start (its partition is being drained, or
        /// went): not claimed, not sent; its message was given up when this was its last result
        /// outstanding. The partition's new owner delivers it.
        case fenced(messageGivenUp: Bool)
    }

    /// One published result: of which message of which batch, and the lane of the permit its
    /// send held (nil: it needed no send, or was republished).
    struct PublishedResult {
        var batch: UInt64
        var message: Int
        var permit: DeliveryCoordinator.Lane?
    }

    /// A sender waiting for a permit, and where the message its send is for stands (nil: a
    /// wait no fence ends).
    struct PermitWaiter {
        var waiter: Waiter
        var position: MessagePosition?
    }
}
