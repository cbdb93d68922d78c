import PushCore
import APNSCore
import PushStores
import KafkaMessages
import Tracing
import FCMCore

/// Results: publishing what the ledger recorded (or what needs no send), rebuilding a recorded
/// outcome's records from its event, and the ledger's key of an event.
extension EventProcessor {
    /// Publishes a batch the ledger writer recorded (its claims ended): the outcomes that stand
    /// together, then gives the permits back and finishes the messages.
    func publishRecorded(_ batch: [(standing: RecordedDelivery, ticket: DeliveryTicket)]) async {
        await publish(
            batch.map { (resultRecords($0.standing, of: $0.ticket.event, headers: $0.ticket.batch.resultHeaders($0.ticket.message)), $0.ticket) }
        )
    }

    /// Publishes results (each with its unregistered event, if any) together; then gives back
    /// the permits of sent ones, counts them and finishes the messages whose last result this was.
    func publish(_ results: [(messages: [KafkaOutgoingMessage], ticket: DeliveryTicket)]) async {
        let started = PipelineClock.now
        do {
            try await publisher.publish(results.flatMap(\.messages))
        } catch {
            return  // Cancelled: the messages stay unfinished and are redelivered.
        }
        let published = PipelineClock.now
        metrics.recordStage(.resultPublish, since: started)
        let finished = coordinator.published(
            results.map { .init(batch: $0.ticket.batch.id, message: $0.ticket.message, permit: $0.ticket.claim == nil ? nil : $0.ticket.batch.lane.priority) }
        )
        for (messages, ticket) in results {
            metrics.recordPublished(lane: ticket.batch.lane.priority, consumedAt: ticket.batch.consumedAt, handedOver: started, now: published)
            if let status = ticket.status {
                metrics.recordResult(status, lane: ticket.batch.lane.priority, platform: ticket.platform)
                if messages.contains(where: { $0.topic == configuration.topics.unregistered }) {
                    metrics.recordUnregisteredPublished()
                }
            } else {
                metrics.recordRepublished()
            }
        }
        for (index, _) in finished {
            let ticket = results[index].ticket
            ticket.batch.trace(ticket.message)?.span.end()
        }
    }

    /// The records of a recorded outcome of `event`: its push.unregistered event, if it marked
    /// the token, then its push.results record; the same bytes each time they are built.
    /// `headers` carry the event's trace context (none when tracing is off).
    func resultRecords(_ outcome: RecordedDelivery, of event: NotificationEvent, headers: [KafkaHeader]) -> [KafkaOutgoingMessage] {
        let result: [UInt8]
        let unregistered: [UInt8]?
        switch outcome.outcome {
        case .message(let recordedResult, let recordedEvent):
            (result, unregistered) = (recordedResult, recordedEvent)
        case .send(let send):
            (result, unregistered) = (
                DeviceResult(recorded: send, of: event, token: outcome.token, userID: outcome.userID).json(),
                send.unregisteredAtMilliseconds.map {
                    UnregisteredTokenEvent(
                        token: outcome.token,
                        topic: event.app(of: send.platform),
                        userID: outcome.userID,
                        environment: send.environment,
                        unregisteredAtMilliseconds: $0,
                        eventID: event.id,
                        platform: send.platform
                    ).json()
                }
            )
        }
        var messages: [KafkaOutgoingMessage] = []
        if let unregistered {
            messages.append(
                KafkaOutgoingMessage(topic: configuration.topics.unregistered, key: Array(outcome.token.utf8), value: unregistered, headers: headers)
            )
        }
        messages.append(resultMessage(result, eventID: event.id, headers: headers))
        return messages
    }

    /// Where `event`'s outcomes are kept: its ID and the day of the record that carried it (for
    /// a record without a timestamp, the day it was polled: ``StartedMessage``).
    func ledgerEvent(_ event: NotificationEvent, of message: StartedMessage) -> LedgerEvent {
        LedgerEvent(eventID: event.id, topic: event.topic, recordTimestampMilliseconds: message.recordTimestampMilliseconds)
    }

    func resultMessage(_ result: [UInt8], eventID: String, headers: [KafkaHeader]) -> KafkaOutgoingMessage {
        KafkaOutgoingMessage(topic: configuration.topics.results, key: Array(eventID.utf8), value: result, headers: headers)
    }

    func noDevicesResult(
        event: NotificationEvent,
        userID: String,
        consumedAt: ContinuousClock.Instant
    ) -> DeviceResult {
        DeviceResult(
            eventID: event.id,
            userID: userID,
            token: nil,
            topic: event.topic,
            environment: nil,
            status: .noDevices,
            apnsStatus: nil,
            reason: nil,
            apnsID: nil,
            attempts: 0,
            latencyMilliseconds: consumedAt.duration(to: PipelineClock.now).wholeMilliseconds,
            completedAtMilliseconds: Self.epochMilliseconds(),
            platform: nil
        )
    }

    static func epochMilliseconds() -> Int64 {
        PipelineClock.wallMilliseconds
    }
}
