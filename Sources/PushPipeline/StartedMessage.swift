import KafkaMessages

/// A message this member started: where it came from, the lane and the assignment generation it
/// started under (``OffsetTracker/start(_:offset:)``), which every later step of it is checked
/// against, and the record timestamp its ledger day is taken from, decided once when it was polled.
struct StartedMessage: Sendable {
    var message: KafkaMessage
    /// The lane and assignment it belongs to: what its finish, its give-up and its fence name.
    var position: MessagePosition
    /// The record's timestamp, or for a record without one (message format v0) the wall clock
    /// when it was polled: the ledger lookup and the ledger write of the message use the same day.
    var recordTimestampMilliseconds: Int64

    init(_ message: KafkaMessage, lane: InputLane.Priority, generation: UInt64, polledAtMilliseconds: Int64) {
        self.message = message
        position = MessagePosition(lane: lane, partition: message.topicPartition, offset: message.offset, generation: generation)
        recordTimestampMilliseconds = message.timestampMilliseconds ?? polledAtMilliseconds
    }
}

/// Where a started message stands in its lane's offsets: the partition and offset it holds back
/// until it is finished or given up, and the assignment generation its sends are fenced on.
struct MessagePosition: Sendable, Hashable {
    var lane: InputLane.Priority
    var partition: KafkaTopicPartition
    var offset: Int64
    var generation: UInt64
}
