import DeviceTokenStore
import Synchronization

/// Group commit for the delivery ledger: outcomes that arrive while a write is in flight wait
/// for it and are then written together, up to `maxBatchSize` per write.
///
/// An outcome thus waits for at most the write in flight and its own (while fewer than
/// `maxBatchSize` queue), however many answers arrive at once; with one write per outcome they
/// queued for PostgreSQL connections instead. That wait is the window in which a crash repeats
/// a push.
final class LedgerWriter: Sendable {
    /// One outcome to record, with the registry mark of a 410.
    typealias Entry = (delivery: RecordedDelivery, mark: UnregisterMark?)

    /// Writes a batch, retrying until it is written; returns, for each entry in order, the outcome
    /// that stands. Throws only when cancelled.
    typealias Write = ([Entry]) async throws(CancellationError) -> [RecordedDelivery]

    private struct State {
        var queue: [(id: Int, entry: Entry)] = []
        /// Entries in the write in flight.
        var writing = 0
        /// The callers waiting for their entry's outcome, by entry ID.
        var waiters: [Int: CheckedContinuation<RecordedDelivery, any Error>] = [:]
        var nextID = 0
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

    /// Outcomes handed to ``record(_:marking:)`` and not yet written: known to APNs and not yet
    /// to the ledger.
    var unrecordedCount: Int {
        state.withLock { $0.queue.count + $0.writing }
    }

    /// Queues an outcome for the next write and returns the outcome that stands once it is
    /// written (see ``DeliveryLedger/record(_:)``). A cancelled caller stops waiting, but its
    /// outcome is still written while the writer runs: APNs has it.
    func record(_ delivery: RecordedDelivery, marking mark: UnregisterMark?) async throws(CancellationError) -> RecordedDelivery {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<RecordedDelivery, any Error>) in
                    let queued = state.withLock { state -> (idleWriter: CheckedContinuation<Void, Never>?, refused: Bool) in
                        if state.stopped || Task.isCancelled { return (nil, true) }
                        state.queue.append((id, (delivery, mark)))
                        state.waiters[id] = continuation
                        defer { state.idleWriter = nil }
                        return (state.idleWriter, false)
                    }
                    if queued.refused { continuation.resume(throwing: CancellationError()) }
                    queued.idleWriter?.resume()
                }
            } onCancel: {
                state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(throwing: CancellationError())
            }
        } catch {
            throw CancellationError()
        }
    }

    /// Writes what is queued with `write`, one batch at a time, each as soon as the previous one
    /// is written, until cancelled; then every caller still waiting gets `CancellationError`.
    func run(writing write: Write) async {
        while let batch = await nextBatch() {
            guard let standing = try? await write(batch.map(\.entry)) else { break }
            let answered = state.withLock { state in
                state.writing = 0
                return zip(batch, standing).compactMap { queued, outcome in
                    state.waiters.removeValue(forKey: queued.id).map { ($0, outcome) }
                }
            }
            for (waiter, outcome) in answered { waiter.resume(returning: outcome) }
        }
        let abandoned = state.withLock { state in
            state.stopped = true
            state.queue = []
            state.writing = 0
            let waiters = Array(state.waiters.values)
            state.waiters = [:]
            return waiters
        }
        for waiter in abandoned { waiter.resume(throwing: CancellationError()) }
    }

    /// The next batch, oldest first, once there is one; nil when cancelled.
    private func nextBatch() async -> [(id: Int, entry: Entry)]? {
        while !Task.isCancelled {
            let batch = state.withLock { state in
                let batch = Array(state.queue.prefix(maxBatchSize))
                state.queue.removeFirst(batch.count)
                state.writing = batch.count
                return batch
            }
            if !batch.isEmpty { return batch }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let ready = state.withLock { state in
                        if !state.queue.isEmpty || Task.isCancelled { return true }
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
