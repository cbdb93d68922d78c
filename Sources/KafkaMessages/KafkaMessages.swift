// The records the pipeline reads and publishes, as a Kafka-protocol log holds them: this module
// names them without depending on a client library, so the pipeline can be embedded with any
// message source and publisher.

/// One Kafka record header. A nil value is a header without a value.
public struct KafkaHeader: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }

    /// A header with a UTF-8 text value.
    public init(key: String, text: String) {
        self.init(key: key, value: Array(text.utf8))
    }
}

/// A partition of a topic.
public struct KafkaTopicPartition: Sendable, Hashable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }
}

/// A record read by the consumer.
public struct KafkaMessage: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var key: [UInt8]?
    /// nil for a tombstone.
    public var value: [UInt8]?
    public var headers: [KafkaHeader]
    /// The record's timestamp (producer create time or broker log-append time, as the topic
    /// says), milliseconds since 1970; nil when the record has none.
    public var timestampMilliseconds: Int64?

    public init(
        topic: String,
        partition: Int32,
        offset: Int64,
        key: [UInt8]?,
        value: [UInt8]?,
        headers: [KafkaHeader] = [],
        timestampMilliseconds: Int64? = nil
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestampMilliseconds = timestampMilliseconds
    }

    public var topicPartition: KafkaTopicPartition { KafkaTopicPartition(topic: topic, partition: partition) }
}

/// A record to produce.
public struct KafkaOutgoingMessage: Sendable, Hashable {
    public var topic: String
    public var key: [UInt8]?
    public var value: [UInt8]?
    public var headers: [KafkaHeader]

    public init(topic: String, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = []) {
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
    }
}

/// An error a publisher reports for a record it could not publish, saying whether publishing
/// the same record again can succeed.
public protocol PublishError: Error {
    /// Whether trying again may succeed (false: the record or the topic needs an operator).
    var isRetriable: Bool { get }
    /// The broker's or client's name for the error (`MSG_SIZE_TOO_LARGE`…), when it gave one.
    var cause: String? { get }
    /// The record is larger than the producer's or the broker's size limit.
    var isRecordTooLarge: Bool { get }
    /// A description for logs; never record contents or secrets.
    var message: String { get }
}

/// Told about consumer-group rebalances, on the consumer's poll thread (never Swift's
/// cooperative pool, so blocking briefly is allowed).
public protocol KafkaRebalanceListener: Sendable {
    /// These partitions now belong to this member.
    func partitionsAssigned(_ partitions: [KafkaTopicPartition])
    /// These partitions are about to go: stop taking their work, finish what is in flight within
    /// a bound, and return the offsets to commit for them before they go.
    func partitionsRevoked(_ partitions: [KafkaTopicPartition]) -> [KafkaTopicPartition: Int64]
    /// These partitions are gone without an orderly revocation (the session timed out, or the
    /// member was fenced out of the group): another member may own them already, so their work
    /// stops at once and nothing of theirs is committed.
    func partitionsLost(_ partitions: [KafkaTopicPartition])
}
