extension DeliveryCoordinator {
    /// The results still to publish for each message of one batch.
    struct BatchProgress {
        /// How a message with no result left to publish ended.
        enum Settled { case finished, givenUp }

        /// Where each message stands in its lane's offsets.
        let positions: [MessagePosition]
        var pending: [Int]
        /// Messages with a fenced send: they are given up, not finished, once nothing is pending.
        var fencedMessages: Set<Int> = []
        /// Messages with results still to publish.
        var unfinished: Int

        init(positions: [MessagePosition], pending: [Int]) {
            self.positions = positions
            self.pending = pending
            unfinished = pending.count { $0 > 0 }
        }

        /// Counts a published result of `message`; how the message ended when it was its last.
        mutating func publish(_ message: Int) -> Settled? {
            guard pending[message] > 0 else { return nil }
            pending[message] -= 1
            guard pending[message] == 0 else { return nil }
            unfinished -= 1
            return fencedMessages.contains(message) ? .givenUp : .finished
        }

        /// Counts a result of `message` that will never be published (its send was fenced).
        mutating func fence(_ message: Int) -> Settled? {
            fencedMessages.insert(message)
            return publish(message)
        }
    }
}
