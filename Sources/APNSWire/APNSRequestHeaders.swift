import APNSCore
import NIOHPACK

/// Builds the HEADERS block of one APNs request.
///
/// HPACK choices follow Apple's provider API guide:
/// - `:path` (it carries the device token) and `authorization` (the JWT) are literals without
///   indexing, so neither ever enters the HPACK dynamic table.
/// - `apns-id`, `apns-expiration` and `apns-collapse-id` are indexed the first time a connection
///   sends them and then sent as literals without indexing: the name stays in the dynamic table,
///   the ever-changing values do not churn it. ``IndexingState`` remembers the first use per connection.
/// - Everything else (`:method`, `:scheme`, `:authority`, `apns-topic`, `apns-push-type`,
///   `apns-priority`) repeats and uses incremental indexing.
///
/// A broadcast names its channel in `apns-channel-id` and its id in `apns-request-id` (the path
/// carries the bundle ID: no `apns-topic`); a channel management request sends only
/// `apns-request-id` and, to read or delete, `apns-channel-id`.
enum APNSRequestHeaders {
    /// Which of the once-indexed headers a connection already sent.
    struct IndexingState: Sendable, Hashable {
        var sentAPNSID = false
        var sentExpiration = false
        var sentCollapseID = false
    }

    static func make(
        for request: APNSRequest,
        authority: String,
        authorization: String?,
        indexing: inout IndexingState
    ) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: ":method", value: request.method)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":path", value: request.path, indexing: .nonIndexable)
        headers.add(name: ":authority", value: authority)
        if let authorization {
            headers.add(name: "authorization", value: authorization, indexing: .nonIndexable)
        }
        switch request.destination {
        case .device:
            headers.add(name: "apns-topic", value: request.topic)
        case .channel(let channelID):
            headers.add(name: "apns-channel-id", value: channelID, indexing: .nonIndexable)
            headers.add(name: "apns-request-id", value: request.apnsID, indexing: .nonIndexable)
        case .channelManagement(let operation):
            headers.add(name: "apns-request-id", value: request.apnsID, indexing: .nonIndexable)
            if let channelID = operation.channelID {
                headers.add(name: "apns-channel-id", value: channelID, indexing: .nonIndexable)
            }
            return headers
        }
        headers.add(name: "apns-push-type", value: request.pushType.rawValue)
        headers.add(name: "apns-priority", value: priorityText(request.priority))
        if case .device = request.destination {
            headers.add(name: "apns-id", value: request.apnsID, indexing: onceIndexed(&indexing.sentAPNSID))
        }
        if let expiration = request.expiration {
            headers.add(
                name: "apns-expiration",
                value: String(expiration),
                indexing: onceIndexed(&indexing.sentExpiration)
            )
        }
        if let collapseID = request.collapseID {
            headers.add(name: "apns-collapse-id", value: collapseID, indexing: onceIndexed(&indexing.sentCollapseID))
        }
        return headers
    }

    /// `.indexable` the first time (and records that), `.nonIndexable` afterwards.
    private static func onceIndexed(_ alreadySent: inout Bool) -> HPACKIndexing {
        if alreadySent { return .nonIndexable }
        alreadySent = true
        return .indexable
    }

    private static func priorityText(_ priority: APNSPriority) -> String {
        switch priority {
        case .immediate: "10"
        case .conserveEnergy: "5"
        case .prioritizePower: "1"
        }
    }
}
