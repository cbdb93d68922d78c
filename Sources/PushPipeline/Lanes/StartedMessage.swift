import PushStores
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
    /// False for a record without a timestamp: its ledger day is the poll's, so an earlier
    /// delivery of it may have recorded its outcomes under the day before or after (``ledgerDays``).
    var hasRecordTimestamp: Bool

    init(_ message: KafkaMessage, lane: InputLane.Priority, generation: UInt64, polledAtMilliseconds: Int64) {
        self.message = message
        position = MessagePosition(lane: lane, partition: message.topicPartition, offset: message.offset, generation: generation)
        recordTimestampMilliseconds = message.timestampMilliseconds ?? polledAtMilliseconds
        hasRecordTimestamp = message.timestampMilliseconds != nil
    }

    /// The ledger days its outcomes may be under: its record's day, and for a record without a
    /// timestamp also the days either side of the poll's: the day before, where a delivery of it
    /// polled before a UTC midnight recorded them; the day after, where one polled after a
    /// midnight did, seen from a member whose wall clock was stepped back across it (an NTP
    /// correction). (One polled two or more midnights away is not found.)
    var ledgerDays: [Int32] {
        let day = LedgerEvent.day(ofMilliseconds: recordTimestampMilliseconds)
        return hasRecordTimestamp ? [day] : [day, day - 1, day + 1]
    }

    /// The outcomes of the event `eventID` of app `topic` that `found` holds under any of
    /// ``ledgerDays``; one recorded under the record's own day wins.
    func recordedOutcomes(eventID: String, topic: String, in found: [LedgerEvent: [LedgerTarget: RecordedDelivery]]) -> [LedgerTarget: RecordedDelivery] {
        // The usual record has a timestamp: one day, its outcomes as found, not copied.
        guard !hasRecordTimestamp else {
            return found[LedgerEvent(eventID: eventID, topic: topic, recordTimestampMilliseconds: recordTimestampMilliseconds)] ?? [:]
        }
        return ledgerDays.reduce(into: [:]) { outcomes, day in
            outcomes.merge(found[LedgerEvent(eventID: eventID, topic: topic, day: day)] ?? [:]) { first, _ in first }
        }
    }

    /// The keys a lookup of the event `eventID` of app `topic` asks for (``ledgerDays``).
    func ledgerEvents(eventID: String, topic: String) -> [LedgerEvent] {
        ledgerDays.map { LedgerEvent(eventID: eventID, topic: topic, day: $0) }
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
