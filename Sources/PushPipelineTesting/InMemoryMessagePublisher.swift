public import KafkaMessages
public import PushPipeline
import Synchronization

/// A ``MessagePublisher`` that keeps every record it is given, in order, and acknowledges it at once.
public final class InMemoryMessagePublisher: MessagePublisher {
    private let records = Mutex<[KafkaOutgoingMessage]>([])

    public init() {}

    public func send(_ message: KafkaOutgoingMessage) async throws {
        records.withLock { $0.append(message) }
    }

    /// Every record published, oldest first.
    public var published: [KafkaOutgoingMessage] { records.withLock { $0 } }

    /// The records published to `topic`, oldest first.
    public func messages(on topic: String) -> [KafkaOutgoingMessage] {
        records.withLock { $0.filter { $0.topic == topic } }
    }
}
