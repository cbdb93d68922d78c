import KafkaMessages
import Synchronization

/// One input lane of the pipeline: push.requests (urgent, with push.tokens and push.channels) or
/// push.requests.bulk. Each lane is its own member of the consumer group, so the two never share
/// a fetch queue: an urgent event is never polled behind a campaign's prefetched backlog. Each
/// has its own window of in-flight messages and its own offsets (kept, with everything else of a
/// message's life, by the ``DeliveryCoordinator``); its sends wait for permits by its
/// ``Priority``, and the bulk lane's are paced by its ``SendPacer``.
final class InputLane: Sendable {
    /// Which queue a lane's senders join for a send permit: urgent ones are served first.
    enum Priority: Sendable, Hashable, CaseIterable {
        /// push.requests: the messages a person is waiting for.
        case urgent
        /// push.requests.bulk: campaigns that use whatever capacity is left.
        case bulk
    }

    /// Which permits its sends wait for: urgent ones are served first.
    let priority: Priority
    /// The group member that reads the lane's topics.
    let source: any MessageSource
    /// Paces the lane's sends (HERALD_BULK_MAX_RATE); nil: not paced.
    let pacer: SendPacer?
    /// True while the lane's consume loop runs and its last poll succeeded.
    let consuming = Atomic(false)

    init(priority: Priority, source: any MessageSource, pacer: SendPacer? = nil) {
        self.priority = priority
        self.source = source
        self.pacer = pacer
    }

    /// The `lane` label of the lane's metrics.
    var label: String { priority.label }
}

extension InputLane.Priority {
    /// The `lane` label of metrics: `urgent` (push.requests) or `bulk` (push.requests.bulk).
    var label: String {
        switch self {
        case .urgent: "urgent"
        case .bulk: "bulk"
        }
    }
}
