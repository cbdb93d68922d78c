public import KafkaTransport

/// The topic names Herald reads and writes (HERALD_TOPIC_*).
public struct PushTopics: Sendable, Hashable {
    public var requests = "push.requests"
    public var tokens = "push.tokens"
    public var results = "push.results"
    public var unregistered = "push.unregistered"
    public var deadLetters = "push.dlq"

    public init() {}
}

/// Settings of the notification pipeline.
public struct PipelineConfiguration: Sendable, Hashable {
    public var topics = PushTopics()
    public var retry = RetryPolicy()
    /// Messages being processed at once, across partitions; polling waits when it is reached.
    public var maxInFlightMessages = 512
    /// Largest number of messages taken from one poll.
    public var pollBatchSize = 128
    /// How often finished offsets are committed.
    public var commitInterval: Duration = .milliseconds(250)

    public init() {}
}

/// Where the pipeline reads messages and acknowledges them: a consumer-group member.
public protocol MessageSource: Sendable {
    /// Returns up to `maxMessages`, waiting at most `timeout` for the first one.
    func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage]
    /// Commits, per partition, the offset of the next message to read.
    func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws
}

/// Where the pipeline publishes results, unregistered-token events and dead letters.
public protocol MessagePublisher: Sendable {
    /// Returns once the broker has acknowledged the record.
    func send(_ message: KafkaOutgoingMessage) async throws
}

extension KafkaConsumer: MessageSource {}
extension KafkaProducer: MessagePublisher {}
