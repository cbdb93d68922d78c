import APNSCore
import PushCore
import PushStores
import KafkaMessages
import Logging

/// Applies push.channels messages: each valid command is performed once and answered once on
/// push.channel-results (key = request id); an unreadable one is dead-lettered. The answer is
/// recorded in the delivery ledger under the request id before it is published, so a
/// redelivered command (a `create` above all) is answered again from the ledger, not performed
/// twice; copies that arrive together wait for the first (one claim per request id).
struct ChannelCommandProcessor: Sendable {
    /// Performs the commands; nil when the embedder gave no channel management client.
    let manager: ChannelManager?
    /// Holds the claims on the request ids being performed, so a copy waits for the first
    /// instead of performing too.
    let coordinator: DeliveryCoordinator
    let ledger: any DeliveryLedger
    let storeOperations: StoreOperations
    let publisher: ReliablePublisher
    let deadLetters: DeadLetters
    let resultsTopic: String
    let metrics: PipelineMetrics
    let logger: Logger

    /// Handles one message; returns true once it is done (answered or dead-lettered), false when
    /// cancelled first (it is then left unfinished and redelivered).
    func process(_ message: StartedMessage) async -> Bool {
        await deadLetters.handle(message.message, decode: ChannelCommand.init(json:)) { command in
            let claim = DeliveryCoordinator.claimKey(eventID: command.ledgerEventID, target: ChannelCommand.ledgerTarget)
            while coordinator.claimSending(claim) != .claimed {
                await coordinator.waitUntilSettled(claim)
                try Task.checkCancellation()
            }
            defer { coordinator.recorded([claim]) }
            let ledgerEvent = LedgerEvent(
                eventID: command.ledgerEventID,
                topic: command.topic,
                recordTimestampMilliseconds: message.recordTimestampMilliseconds
            )
            let lookup = message.ledgerEvents(eventID: command.ledgerEventID, topic: command.topic)
            let recorded = try await storeOperations.run { try await ledger.recordedDeliveries(of: lookup) }
            let outcomes = message.recordedOutcomes(eventID: command.ledgerEventID, topic: command.topic, in: recorded)
            let answer: [UInt8]
            if let outcome = outcomes[ChannelCommand.ledgerTarget], case .message(let result, _) = outcome.outcome {
                answer = result
            } else {
                let result = try await perform(command)
                let message = result.json()
                let delivery = RecordedDelivery(
                    event: ledgerEvent,
                    target: ChannelCommand.ledgerTarget,
                    userID: "",
                    outcome: .message(result: message, unregisteredEvent: nil)
                )
                let standing = try await storeOperations.run { try await ledger.record([(delivery, nil)]) }
                answer = if case .message(let recorded, _) = standing.first?.outcome { recorded } else { message }
                metrics.recordChannelCommand(command.action, result.status)
                logger.info(
                    "channel command answered",
                    metadata: [
                        PipelineLoggingKeys.action: "\(command.action.rawValue)",
                        PipelineLoggingKeys.status: "\(result.status.rawValue)",
                        PipelineLoggingKeys.apnsReason: "\(result.reason ?? "none")",
                    ]
                )
            }
            try await publisher.publish([KafkaOutgoingMessage(topic: resultsTopic, key: Array(command.requestID.utf8), value: answer)])
        }
    }

    private func perform(_ command: ChannelCommand) async throws(CancellationError) -> ChannelCommandResult {
        guard let manager else {
            return ChannelCommandResult(
                command: command,
                status: .rejected,
                reason: "ChannelManagementUnavailable",
                completedAtMilliseconds: PipelineClock.wallMilliseconds
            )
        }
        return try await manager.perform(command)
    }
}
