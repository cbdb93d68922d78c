import PushCore
import WebPushCore
import PushStores
import KafkaMessages
import Logging

/// Applies push.tokens messages to the registry: a valid update is applied (with the
/// contract's ordering rule, in the store), an unreadable one is dead-lettered.
struct TokenUpdates: Sendable {
    let store: any DeviceTokenStore
    let storeOperations: StoreOperations
    let deadLetters: DeadLetters
    /// The hosts a browser subscription's endpoint may name.
    let webPushHosts: WebPushHostAllowList
    let logger: Logger

    /// Handles one message; returns true once it is done (applied or dead-lettered), false when
    /// cancelled first (it is then left unfinished and redelivered).
    func process(_ message: KafkaMessage) async -> Bool {
        await deadLetters.handle(
            message,
            decode: { value throws(InputRejection) in
                try TokenRegistryUpdate(json: value, webPushHosts: webPushHosts)
            }
        ) { update in
            let applied = try await storeOperations.run { try await store.apply(update) }
            logger.debug(
                "token update",
                metadata: [
                    PipelineLoggingKeys.token: "\(DeviceTokenText.redacted(update.token))",
                    PipelineLoggingKeys.action: "\(update.action.rawValue)",
                    PipelineLoggingKeys.applied: "\(applied)",
                ]
            )
        }
    }
}
