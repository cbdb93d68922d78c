import PushStores
import Synchronization

/// Group commit for the delivery ledger: outcomes submitted while a write is in flight are
/// written together in the next, up to `maxBatchSize` per write; each written batch is then
/// handed on (to be published) while the next write starts.
///
/// Submitting never suspends: the sender of an outcome does not wait for its write, and the
/// written batch goes on as a whole, so recording and publishing cost one wake-up per batch
/// rather than one per outcome (BENCHMARKS.md). An outcome waits for at most the write in
/// flight and its own (while fewer than `maxBatchSize` queue): the window in which a crash
/// repeats a push. Urgent outcomes (push.requests) go into the next write before any bulk one,
/// so a campaign's queue never holds them back for more than the write in flight.
final class LedgerWriter<Ticket: Sendable>: Sendable {
    /// One outcome to record, with the registry mark of a 410 and what its submitter needs back.
    struct Entry: Sendable {
        var delivery: RecordedDelivery
        var mark: UnregisterMark?
        var ticket: Ticket
    }

    /// Writes a batch, retrying until it is written; returns, for each entry in order, the outcome
    /// that stands. Throws only when cancelled.
    typealias Write = ([(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws(CancellationError) -> [RecordedDelivery]

    /// Receives a written batch: for each entry in order, the outcome that stands and its ticket.
    typealias Recorded = @Sendable ([(standing: RecordedDelivery, ticket: Ticket)]) async -> Void

    private struct State {
        var urgentQueue: [Entry] = []
        var queue: [Entry] = []
        /// Entries in the write in flight.
        var writing = 0
        /// `run()` waiting for the queue to fill.
        var idleWriter: CheckedContinuation<Void, Never>?
        /// `run()` ended: nothing is written any more.
        var stopped = false
    }

    private let maxBatchSize: Int
    private let state = Mutex(State())

    init(maxBatchSize: Int) {
        self.maxBatchSize = max(1, maxBatchSize)
    }

    /// Outcomes submitted and not yet written: known to APNs and not yet to the ledger.
    var unrecordedCount: Int {
        state.withLock { $0.urgentQueue.count + $0.queue.count + $0.writing }
    }

    /// Queues an outcome for the next write, ahead of every bulk one when `urgent`; false once
    /// the writer has stopped (the outcome is then not recorded, and its message must not be
    /// acknowledged).
    @discardableResult
    func submit(_ delivery: RecordedDelivery, marking mark: UnregisterMark?, ticket: Ticket, urgent: Bool = true) -> Bool {
        let (accepted, idleWriter) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            if state.stopped { return (false, nil) }
            let entry = Entry(delivery: delivery, mark: mark, ticket: ticket)
            if urgent {
                state.urgentQueue.append(entry)
            } else {
                state.queue.append(entry)
            }
            defer { state.idleWriter = nil }
            return (true, state.idleWriter)
        }
        idleWriter?.resume()
        return accepted
    }

    /// Writes what is queued with `write`, one batch at a time, each as soon as the previous one
    /// is written, and hands each written batch to `recorded` concurrently with the next write;
    /// runs until cancelled, then returns once every handed-on batch is done.
    func run(writing write: Write, then recorded: @escaping Recorded) async {
        await withDiscardingTaskGroup { group in
            while let batch = await nextBatch() {
                guard let standing = try? await write(batch.map { ($0.delivery, $0.mark) }) else { break }
                state.withLock { $0.writing = 0 }
                let written = zip(standing, batch).map { (standing: $0, ticket: $1.ticket) }
                group.addTask { await recorded(written) }
            }
            state.withLock { state in
                state.stopped = true
                state.urgentQueue = []
                state.queue = []
                state.writing = 0
            }
        }
    }

    /// The next batch, urgent outcomes first, each kind oldest first, once there is one; nil
    /// when cancelled.
    private func nextBatch() async -> [Entry]? {
        while !Task.isCancelled {
            let batch = state.withLock { state in
                var batch = Array(state.urgentQueue.prefix(maxBatchSize))
                state.urgentQueue.removeFirst(batch.count)
                let bulk = state.queue.prefix(maxBatchSize - batch.count)
                batch += bulk
                state.queue.removeFirst(bulk.count)
                state.writing = batch.count
                return batch
            }
            if !batch.isEmpty { return batch }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let ready = state.withLock { state in
                        if !state.urgentQueue.isEmpty || !state.queue.isEmpty || Task.isCancelled { return true }
                        state.idleWriter = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                state.withLock { state in
                    defer { state.idleWriter = nil }
                    return state.idleWriter
                }?.resume()
            }
        }
        return nil
    }
}
