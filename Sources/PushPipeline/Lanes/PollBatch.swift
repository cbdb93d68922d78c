import KafkaMessages

/// One poll batch of push.requests messages, as its results travel: the messages, the lane
/// they came from, when they were polled and their traces. Its progress towards the last
/// published result is the ``DeliveryCoordinator``'s, under ``id``.
final class PollBatch: Sendable {
    /// The batch's ID in the ``DeliveryCoordinator``.
    let id: UInt64
    private let messages: [StartedMessage]
    /// The lane the batch was polled from: its offsets, permits and pacing.
    let lane: InputLane
    /// When the batch was polled.
    let consumedAt: ContinuousClock.Instant
    /// Each message's event trace, when tracing is on.
    private let traces: [EventTrace]?

    init(id: UInt64, messages: [StartedMessage], lane: InputLane, consumedAt: ContinuousClock.Instant, traces: [EventTrace]?) {
        self.id = id
        self.messages = messages
        self.lane = lane
        self.consumedAt = consumedAt
        self.traces = traces
    }

    /// The trace of message `index`'s event (nil when tracing is off).
    func trace(_ index: Int) -> EventTrace? {
        traces?[index]
    }

    /// The trace-context headers for message `index`'s results: its event span's context when
    /// tracing is on, otherwise the `traceparent` (and `tracestate`) the message carried, so
    /// results stay in the producer's trace whether or not Herald exports spans.
    func resultHeaders(_ index: Int) -> [KafkaHeader] {
        traces?[index].headers ?? TraceContextHeaders.propagated(from: messages[index].message.headers)
    }

    /// Message `index` of the batch.
    func message(_ index: Int) -> StartedMessage {
        messages[index]
    }
}
