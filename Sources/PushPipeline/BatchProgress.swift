import KafkaMessages
import Synchronization

/// Counts down the results still to publish for each message of one poll batch, and wakes the
/// batch's task once every message is finished.
final class BatchProgress: Sendable {
    private struct State {
        /// Results still to publish, per message.
        var pending: [Int]
        /// Messages with results still to publish.
        var unfinished: Int
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let messages: [KafkaMessage]
    private let state: Mutex<State>
    /// The lane the batch was polled from: its offsets, permits and pacing.
    let lane: InputLane
    /// When the batch was polled.
    let consumedAt: ContinuousClock.Instant

    /// Each message's event trace, when tracing is on.
    private let traces: [EventTrace]?

    /// `results[i]` is the number of results message `i` publishes (none: finished already).
    init(messages: [KafkaMessage], results: [Int], lane: InputLane, consumedAt: ContinuousClock.Instant, traces: [EventTrace]?) {
        self.messages = messages
        self.lane = lane
        self.consumedAt = consumedAt
        self.traces = traces
        state = Mutex(State(pending: results, unfinished: results.count { $0 > 0 }))
    }

    /// The trace of message `index`'s event (nil when tracing is off).
    func trace(_ index: Int) -> EventTrace? {
        traces?[index]
    }

    /// The trace-context headers for message `index`'s results: its event span's context when
    /// tracing is on, otherwise the `traceparent` (and `tracestate`) the message carried, so
    /// results stay in the producer's trace whether or not Herald exports spans.
    func resultHeaders(_ index: Int) -> [KafkaHeader] {
        traces?[index].headers ?? TraceContextHeaders.propagated(from: messages[index].headers)
    }

    /// Message `index` of the batch.
    func message(_ index: Int) -> KafkaMessage {
        messages[index]
    }

    /// Counts one published result of message `index`; returns the message when that was its
    /// last (never for an abandoned message).
    func published(_ index: Int) -> KafkaMessage? {
        let (finished, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard state.pending[index] > 0 else { return (false, nil) }
            state.pending[index] -= 1
            guard state.pending[index] == 0 else { return (false, nil) }
            state.unfinished -= 1
            guard state.unfinished == 0 else { return (true, nil) }
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        waiter?.resume()
        return finished ? messages[index] : nil
    }

    /// Gives up message `index` without finishing it: its partition went to another member,
    /// which delivers it again. The batch no longer waits for its results; the message is never
    /// returned by ``published(_:)``, so its offset is not committed here. True the first time.
    func abandon(_ index: Int) -> Bool {
        let (abandoned, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard state.pending[index] > 0 else { return (false, nil) }
            state.pending[index] = 0
            state.unfinished -= 1
            guard state.unfinished == 0 else { return (true, nil) }
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        waiter?.resume()
        return abandoned
    }

    /// Returns once every message is finished, or when the task is cancelled.
    func waitUntilFinished() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = state.withLock { state in
                    if state.unfinished == 0 || Task.isCancelled { return true }
                    state.waiter = continuation
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }?.resume()
        }
    }
}
