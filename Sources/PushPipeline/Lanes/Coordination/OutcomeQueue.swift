/// The state machine's part of the ledger writer (group commit): the outcomes sends were
/// answered with and the ledger has not recorded yet, and where the one writer stands.
/// Outcomes answered while a write is in flight go together into the next, up to
/// `maxBatchSize` each, urgent ones (push.requests) ahead of every bulk one, each kind oldest
/// first: a campaign's queue never holds an alert back for more than the write in flight.
///
/// Answering never waits: the sender hands its outcome over and goes on. An outcome waits for
/// at most the write in flight and its own (while fewer than `maxBatchSize` queue): the window
/// in which a crash repeats a push.
struct OutcomeQueue<Outcome, Waiter> {
    /// Where the writer stands.
    enum Writer {
        /// Writing a batch (or about to ask for one).
        case busy
        /// Waiting for an outcome to be answered.
        case waiting(Waiter)
        /// Ended: outcomes are refused from now on (their messages are not acknowledged).
        case stopped
    }

    private var urgent: [Outcome] = []
    private var bulk: [Outcome] = []
    /// Outcomes in the write in flight.
    private var writing = 0
    private(set) var writer = Writer.busy
    let maxBatchSize: Int

    init(maxBatchSize: Int) {
        self.maxBatchSize = max(1, maxBatchSize)
    }

    /// Outcomes answered and not yet recorded: known to the push service, not yet to the ledger.
    var unrecordedCount: Int { urgent.count + bulk.count + writing }

    /// Queues an answered outcome for the next write, ahead of every bulk one when `isUrgent`;
    /// returns whether it was accepted (not once the writer stopped) and the writer to wake.
    mutating func answered(_ outcome: Outcome, urgent isUrgent: Bool) -> (accepted: Bool, wake: Waiter?) {
        if case .stopped = writer { return (false, nil) }
        if isUrgent { urgent.append(outcome) } else { bulk.append(outcome) }
        guard case .waiting(let waiter) = writer else { return (true, nil) }
        writer = .busy
        return (true, waiter)
    }

    /// The write in flight ended: takes the next batch, urgent outcomes first, each kind oldest
    /// first, at most `maxBatchSize` (empty when nothing is queued, or the writer stopped).
    mutating func nextBatch() -> [Outcome] {
        guard case .busy = writer else { return [] }
        var batch = Array(urgent.prefix(maxBatchSize))
        urgent.removeFirst(batch.count)
        let fromBulk = bulk.prefix(maxBatchSize - batch.count)
        batch += fromBulk
        bulk.removeFirst(fromBulk.count)
        writing = batch.count
        return batch
    }

    /// Registers the writer until an outcome is answered; false (nothing registered) when one
    /// is queued already or the writer stopped.
    mutating func waitForOutcomes(_ waiter: Waiter) -> Bool {
        guard case .busy = writer, urgent.isEmpty, bulk.isEmpty else { return false }
        writer = .waiting(waiter)
        return true
    }

    /// Ends the writer's wait (it was cancelled): its waiter, when it was registered.
    mutating func cancelWait() -> Waiter? {
        guard case .waiting(let waiter) = writer else { return nil }
        writer = .busy
        return waiter
    }

    /// The writer ended: what is queued is dropped (its messages stay unacknowledged and are
    /// redelivered) and every outcome answered from now on is refused.
    mutating func stop() {
        (urgent, bulk, writing, writer) = ([], [], 0, .stopped)
    }
}
