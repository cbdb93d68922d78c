/// The `apns-push-type` values Apple's provider API accepts.
public enum APNSPushType: String, Sendable, Hashable, CaseIterable, Codable {
    case alert
    case background
    case voip
    case complication
    case fileprovider
    case mdm
    case liveactivity
    case location
    case pushtotalk
    case widgets
    /// Control widgets (iOS 18): their topic carries `.push-type.controls`.
    case controls

    /// The suffix Apple requires on `apns-topic` for this push type (empty when none).
    public var topicSuffix: String {
        switch self {
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .location: ".location-query"
        case .pushtotalk: ".voip-ptt"
        case .liveactivity: ".push-type.liveactivity"
        case .widgets: ".push-type.widgets"
        case .controls: ".push-type.controls"
        case .alert, .background, .mdm: ""
        }
    }

    /// The `apns-topic` for an app's bundle ID and this push type.
    public func apnsTopic(bundleID: String) -> String {
        bundleID + topicSuffix
    }

    /// The priority used when an event names none: 5 for background pushes, 10 otherwise.
    public var defaultPriority: APNSPriority {
        self == .background ? .conserveEnergy : .immediate
    }

    /// The largest payload APNs accepts for this push type, in bytes.
    public var maximumPayloadSize: Int {
        self == .voip ? 5120 : 4096
    }
}

/// `apns-priority`: 10 sends now, 5 respects the device's power state, 1 prioritises power.
public enum APNSPriority: Int, Sendable, Hashable, CaseIterable, Codable {
    case prioritizePower = 1
    case conserveEnergy = 5
    case immediate = 10
}

/// The APNs environment a device token belongs to.
public enum APNSEnvironment: String, Sendable, Hashable, CaseIterable, Codable {
    case production
    case sandbox
}
