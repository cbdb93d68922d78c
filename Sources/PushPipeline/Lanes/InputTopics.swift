extension PushTopics {
    /// What the records of one of Herald's input topics are.
    public enum Input: Sendable, Hashable {
        /// Notification events: resolved, sent, a result per device.
        case notificationEvents
        /// Registrations and unregistrations of device tokens.
        case tokenUpdates
        /// Broadcast channel management commands.
        case channelCommands
    }

    /// The one table of the topics Herald reads: what each topic's records are, and whether the
    /// bulk lane (a consumer in a group of its own) reads it rather than the urgent one. The
    /// consumers' subscriptions and the pipeline's routing both come from it.
    public var inputs: [(topic: String, input: Input, isBulk: Bool)] {
        [
            (requests, .notificationEvents, false),
            (tokens, .tokenUpdates, false),
            (channels, .channelCommands, false),
            (bulkRequests, .notificationEvents, true),
        ]
    }

    /// The topics the bulk lane's consumer (`bulk`) or the urgent one's subscribes to.
    public func subscriptions(bulk: Bool) -> [String] {
        inputs.filter { $0.isBulk == bulk }.map(\.topic)
    }
}
