import APNSCore
import PushStores

/// Where one result of an event goes: a device of one of its users, or the broadcast channel
/// the event names (one result per event).
enum Recipient: Sendable, Hashable {
    case device(DeviceToken)
    case channel(id: String, environment: APNSEnvironment)

    /// The destination's `token` in the delivery ledger and in claim keys: the device token, or
    /// `channel:` and the channel ID (device tokens are hex, so the two never meet).
    var ledgerToken: String {
        switch self {
        case .device(let device): device.token
        case .channel(let id, _): Self.ledgerToken(channelID: id)
        }
    }

    /// What the delivery ledger keeps the outcome under: the device (of its platform), or the
    /// channel.
    var ledgerTarget: LedgerTarget {
        switch self {
        case .device(let device): LedgerTarget(device: device.token, platform: device.platform)
        case .channel(let id, _): Self.ledgerTarget(channelID: id)
        }
    }

    /// The ledger's target of the channel `channelID`.
    static func ledgerTarget(channelID: String) -> LedgerTarget {
        LedgerTarget(.other, ledgerToken(channelID: channelID))
    }

    /// The ledger's `token` of the channel `channelID`.
    static func ledgerToken(channelID: String) -> String {
        "channel:" + channelID
    }

    /// The APNs environment it is reached in.
    var environment: APNSEnvironment {
        switch self {
        case .device(let device): device.environment
        case .channel(_, let environment): environment
        }
    }

    /// The user whose device it is ("" for a channel, which belongs to no user).
    var userID: String {
        switch self {
        case .device(let device): device.userID
        case .channel: ""
        }
    }
}
