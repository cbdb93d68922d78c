/// Connection settings shared by Herald's consumer and producer.
public struct KafkaConfiguration: Sendable, Hashable {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    public var bootstrapServers: String
    /// Any other librdkafka property by its dotted name (`security.protocol`, `sasl.username`…).
    /// Values may be secrets: they are never logged.
    public var properties: [String: String]

    public init(bootstrapServers: String, properties: [String: String] = [:]) {
        self.bootstrapServers = bootstrapServers
        self.properties = properties
    }
}

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
