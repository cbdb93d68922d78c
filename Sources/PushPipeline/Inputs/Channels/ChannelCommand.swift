import JSONCore
public import PushCore
public import APNSCore
import PushStores

/// A validated push.channels command: manage one app's Live Activity broadcast channels.
public struct ChannelCommand: Sendable, Hashable {
    public enum Action: String, Sendable, Hashable, CaseIterable {
        case create
        case read
        case delete
        case list
    }

    /// Identifies the command and its one answer (the push.channel-results key), 1..128 bytes.
    public var requestID: String
    public var action: Action
    /// The app's bundle ID.
    public var topic: String
    public var environment: APNSEnvironment
    /// For `create`: 0 keeps no message, 1 keeps the last one for new subscribers.
    public var messageStoragePolicy: Int?
    /// For `read` and `delete`.
    public var channelID: String?

    public init(
        requestID: String,
        action: Action,
        topic: String,
        environment: APNSEnvironment = .production,
        messageStoragePolicy: Int? = nil,
        channelID: String? = nil
    ) {
        self.requestID = requestID
        self.action = action
        self.topic = topic
        self.environment = environment
        self.messageStoragePolicy = messageStoragePolicy
        self.channelID = channelID
    }

    /// Validates a push.channels value against the contract.
    public init(json value: [UInt8]?) throws(InputRejection) {
        let fields = FieldReader(object: try JSONObjectDecoder.decode(value))
        requestID = try fields.string("request_id", bytes: 1...128, required: true)!
        let actionText = try fields.string("action", bytes: 1...16, required: true)!
        guard let action = Action(rawValue: actionText) else {
            throw InputRejection(.schemaViolation, "action must be create, read, delete or list")
        }
        self.action = action
        topic = try fields.string("topic", bytes: 1...255, required: true, headerValue: true)!
        environment = try fields.environment() ?? .production
        let policy = try fields.integer("message_storage_policy")
        if let policy, policy != 0, policy != 1 {
            throw InputRejection(.schemaViolation, "message_storage_policy must be 0 or 1")
        }
        messageStoragePolicy = action == .create ? Int(policy ?? 0) : nil
        let channelID = try fields.string("channel_id", bytes: 1...256, required: action == .read || action == .delete, headerValue: true)
        if let channelID, !Base64Text.isValid(channelID) {
            throw InputRejection(.schemaViolation, "channel_id must be base64, as APNs issued it")
        }
        self.channelID = action == .read || action == .delete ? channelID : nil
    }

    /// The channel management request this command makes.
    public var operation: APNSChannelOperation {
        switch action {
        case .create: .create(messageStoragePolicy: messageStoragePolicy ?? 0)
        case .read: .read(channelID: channelID ?? "")
        case .delete: .delete(channelID: channelID ?? "")
        case .list: .list
        }
    }
}

/// One push.channel-results message: the answer to one ``ChannelCommand``.
public struct ChannelCommandResult: Sendable, Hashable {
    public enum Status: String, Sendable, Hashable {
        case ok
        /// APNs refused it (unknown channel, channel limit, …) or Herald could not send it.
        case rejected
        /// The attempts or the deadline ran out (429, 5xx, connection loss).
        case failed
    }

    public var command: ChannelCommand
    public var status: Status
    public var apnsStatus: Int?
    public var reason: String?
    /// The created, read or deleted channel.
    public var channelID: String?
    /// For `list`: the app's channels.
    public var channelIDs: [String]?
    /// For `create` and `read`.
    public var messageStoragePolicy: Int?
    /// Milliseconds since 1970.
    public var completedAtMilliseconds: Int64

    public init(
        command: ChannelCommand,
        status: Status,
        apnsStatus: Int? = nil,
        reason: String? = nil,
        channelID: String? = nil,
        channelIDs: [String]? = nil,
        messageStoragePolicy: Int? = nil,
        completedAtMilliseconds: Int64
    ) {
        self.command = command
        self.status = status
        self.apnsStatus = apnsStatus
        self.reason = reason
        self.channelID = channelID
        self.channelIDs = channelIDs
        self.messageStoragePolicy = messageStoragePolicy
        self.completedAtMilliseconds = completedAtMilliseconds
    }

    /// The message value, every field present (`null` when absent).
    public func json() -> [UInt8] {
        JSONValue.object([
            .init("request_id", .string(command.requestID)),
            .init("action", .string(command.action.rawValue)),
            .init("topic", .string(command.topic)),
            .init("environment", .string(command.environment.rawValue)),
            .init("status", .string(status.rawValue)),
            .init("apns_status", apnsStatus.map { .number(String($0)) } ?? .null),
            .init("reason", reason.map(JSONValue.string) ?? .null),
            .init("channel_id", channelID.map(JSONValue.string) ?? .null),
            .init("channel_ids", channelIDs.map { .array($0.map(JSONValue.string)) } ?? .null),
            .init("message_storage_policy", messageStoragePolicy.map { .number(String($0)) } ?? .null),
            .init("completed_at", .string(RFC3339.format(milliseconds: completedAtMilliseconds))),
        ]).serialized()
    }
}

extension ChannelCommand {
    /// The delivery ledger's event ID for this command's answer: the request ID under a prefix,
    /// so it never meets a notification's event ID.
    var ledgerEventID: String { "channel-request:" + requestID }

    /// The delivery ledger's `token` for a command's answer (a notification's is its
    /// ``Recipient/ledgerToken``), and what its apns-request-id is derived from.
    static let ledgerToken = "channel-management"

    /// The ledger's target of every command's answer.
    static let ledgerTarget = LedgerTarget(.other, ledgerToken)
}
