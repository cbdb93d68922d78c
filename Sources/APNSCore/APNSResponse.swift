/// APNs' answer to one request.
public struct APNSResponse: Sendable, Hashable {
    /// The HTTP status (200 on success).
    public var status: Int
    /// The `apns-id` APNs echoed, if any.
    public var apnsID: String?
    /// The error reason from the JSON body; nil on success.
    public var reason: APNSReason?
    /// For 410: when APNs learned the token stopped being valid, in milliseconds since 1970.
    public var timestampMilliseconds: Int64?
    /// `apns-unique-id` (the development environment returns one, for Apple's delivery log).
    public var uniqueID: String?
    /// `apns-channel-id` of a channel management answer (the new channel's, for a create).
    public var channelID: String?
    /// The body of a successful channel management answer (a channel's settings, or the list).
    public var body: [UInt8]?

    public init(
        status: Int,
        apnsID: String? = nil,
        reason: APNSReason? = nil,
        timestampMilliseconds: Int64? = nil,
        uniqueID: String? = nil,
        channelID: String? = nil,
        body: [UInt8]? = nil
    ) {
        self.status = status
        self.apnsID = apnsID
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
        self.uniqueID = uniqueID
        self.channelID = channelID
        self.body = body
    }
}
