import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK

/// Live Activity broadcast channels (iOS 18): the broadcast send, `POST /4/broadcasts/apps/<bundle
/// ID>` with `apns-channel-id`, and the channel management API under `/1/apps/<bundle ID>/`
/// (create, read and delete on `channels`, list on `all-channels`). Channels live in the ledger,
/// per app; the same server may stand in for both of Apple's hosts.
extension MockAPNSServer {
    static let broadcastPathPrefix = "/4/broadcasts/apps/"
    static let channelManagementPathPrefix = "/1/apps/"
    /// Apple's limit for a broadcast payload.
    static let broadcastPayloadLimit = 5120

    /// Answers a broadcast or channel management request, counts it and logs it.
    func channelAnswer(_ head: RequestHead, headers: HPACKHeaders, payload: ByteBuffer, payloadLength: Int) -> Answer {
        let requestID = head.requestID.flatMap { Encoding.isCanonicalUUID($0) ? $0 : nil } ?? Encoding.randomLowercaseUUID()
        let path = head.path ?? ""
        var answer: Answer
        if let rejection = providerTokenRejection(head) {
            answer = Answer(status: rejection.status, apnsID: requestID, reason: rejection.rawValue)
        } else if path.hasPrefix(Self.broadcastPathPrefix) {
            let bundleID = String(path.dropFirst(Self.broadcastPathPrefix.utf8.count))
            answer = broadcast(head, bundleID: bundleID, requestID: requestID, payloadLength: payloadLength)
        } else {
            answer = manageChannels(head, path: path, payload: payload, requestID: requestID)
        }
        answer.echoesRequestID = true
        let logged = ReceivedRequest(
            token: "",
            headers: headers.map { (name: $0.name, value: $0.value) },
            payload: Array(payload.readableBytesView),
            status: answer.status,
            reason: answer.reason,
            apnsID: requestID
        )
        let logsRequests = self.configuration.requestLogLimit > 0
        self.ledger.withLockedValue { ledger in
            ledger.countsByStatus[answer.status, default: 0] += 1
            if logsRequests { ledger.log(logged) }
        }
        self.logger.trace(
            "mock APNs answered a channel request",
            metadata: ["mock_apns.path": "\(path)", "mock_apns.status": "\(answer.status)"]
        )
        return answer
    }

    private func broadcast(_ head: RequestHead, bundleID: String, requestID: String, payloadLength: Int) -> Answer {
        func rejected(_ rejection: Rejection) -> Answer {
            Answer(status: rejection.status, apnsID: requestID, reason: rejection.rawValue)
        }
        guard head.method == "POST" else { return rejected(.methodNotAllowed) }
        guard !bundleID.isEmpty, !bundleID.contains("/") else { return rejected(.badPath) }
        guard let channelID = head.channelID else { return rejected(.missingChannelId) }
        guard Self.isBase64(channelID) else { return rejected(.badChannelId) }
        guard let pushType = head.pushType else { return rejected(.missingPushType) }
        guard pushType == "liveactivity" else { return rejected(.invalidPushType) }
        if let priority = head.priority, priority != "10", priority != "5", priority != "1" { return rejected(.badPriority) }
        if let requested = head.requestID, !Encoding.isCanonicalUUID(requested) { return rejected(.badMessageId) }
        if let expiration = head.expiration, Int64(expiration) == nil { return rejected(.badExpirationDate) }
        if head.hasRepeatedAPNSHeader { return rejected(.duplicateHeaders) }
        guard payloadLength > 0 else { return rejected(.payloadEmpty) }
        guard payloadLength <= Self.broadcastPayloadLimit else { return rejected(.payloadTooLarge) }
        let uniqueIDHeader = self.uniqueIDHeader
        return self.ledger.withLockedValue { ledger in
            guard ledger.channels[bundleID]?[channelID] != nil else { return rejected(.channelNotRegistered) }
            ledger.broadcastsByChannel[channelID, default: 0] += 1
            return Answer(status: 200, apnsID: requestID, headers: uniqueIDHeader)
        }
    }

    private func manageChannels(_ head: RequestHead, path: String, payload: ByteBuffer, requestID: String) -> Answer {
        func rejected(_ rejection: Rejection) -> Answer {
            Answer(status: rejection.status, apnsID: requestID, reason: rejection.rawValue)
        }
        let parts = path.dropFirst(Self.channelManagementPathPrefix.utf8.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty else { return rejected(.badPath) }
        let bundleID = String(parts[0])
        switch (parts[1], head.method) {
        case ("all-channels", "GET"):
            let channels = self.ledger.withLockedValue { $0.channelOrder[bundleID] ?? [] }
            let list = channels.map { "\"\($0)\"" }.joined(separator: ",")
            return Answer(status: 200, apnsID: requestID, successBody: #"{"channels":[\#(list)]}"#)
        case ("channels", "POST"):
            let body = (try? JSONSerialization.jsonObject(with: Data(payload.readableBytesView))) as? [String: Any]
            guard let body, body["push-type"] as? String == "LiveActivity" else { return rejected(.invalidPushType) }
            let policy = body["message-storage-policy"] as? Int ?? 0
            let limit = self.configuration.maximumChannelsPerApp
            return self.ledger.withLockedValue { ledger in
                guard ledger.channels[bundleID, default: [:]].count < limit else { return rejected(.cannotCreateChannelConfig) }
                let channelID = Self.randomChannelID()
                ledger.channels[bundleID, default: [:]][channelID] = policy
                ledger.channelOrder[bundleID, default: []].append(channelID)
                return Answer(status: 201, apnsID: requestID, headers: [("apns-channel-id", channelID)])
            }
        case ("channels", "GET"), ("channels", "DELETE"):
            guard let channelID = head.channelID else { return rejected(.missingChannelId) }
            let deletes = head.method == "DELETE"
            return self.ledger.withLockedValue { ledger in
                guard let policy = ledger.channels[bundleID]?[channelID] else { return rejected(.channelNotRegistered) }
                guard deletes else {
                    let settings = #"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#
                    return Answer(status: 200, apnsID: requestID, headers: [("apns-channel-id", channelID)], successBody: settings)
                }
                ledger.channels[bundleID]?[channelID] = nil
                ledger.channelOrder[bundleID]?.removeAll { $0 == channelID }
                return Answer(status: 204, apnsID: requestID)
            }
        case ("channels", _), ("all-channels", _):
            return rejected(.methodNotAllowed)
        default:
            return rejected(.badPath)
        }
    }

    /// The broadcast channels of `bundleID`, oldest first.
    public func channels(bundleID: String) -> [String] {
        self.ledger.withLockedValue { $0.channelOrder[bundleID] ?? [] }
    }

    /// Broadcasts accepted on `channelID` since the start (or the last ``reset()``).
    public func broadcastCount(channelID: String) -> Int {
        self.ledger.withLockedValue { $0.broadcastsByChannel[channelID] ?? 0 }
    }

    /// A channel ID as APNs issues them: 16 random bytes in base64.
    private static func randomChannelID() -> String {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
    }

    /// Whether `text` is non-empty padded base64 (RFC 4648 alphabet).
    private static func isBase64(_ text: String) -> Bool {
        !text.isEmpty && Data(base64Encoded: text) != nil
    }
}
