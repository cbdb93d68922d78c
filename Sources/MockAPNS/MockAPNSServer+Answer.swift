import Foundation
import Logging
import MockServerSupport
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK

extension MockAPNSServer {
    /// What the server sends back for one request.
    struct Answer: Sendable {
        var status: Int
        var apnsID: String
        /// The error reason; `nil` for 200.
        var reason: String?
        /// When APNs learnt the token is no longer valid (410 only), milliseconds since 1970.
        var unregisteredAt: Int64?
        /// Response headers beyond `:status` and the request's id (channel ids, `apns-unique-id`).
        var headers: [(name: String, value: String)] = []
        /// The body of a successful channel management answer.
        var successBody: String?
        /// Whether the id goes back as `apns-request-id` (channel requests) rather than `apns-id`.
        var echoesRequestID = false

        /// `{"reason":…}` (plus `timestamp` for 410, in milliseconds since 1970), or the success
        /// body; `nil` otherwise ("Handling notification responses from APNs", its response keys).
        var jsonBody: String? {
            guard let reason else { return successBody }
            guard let unregisteredAt else { return #"{"reason":"\#(reason)"}"# }
            return #"{"reason":"\#(reason)","timestamp":\#(unregisteredAt)}"#
        }
    }

    /// The push types APNs accepts in `apns-push-type`.
    static let knownPushTypes: Set<String> = [
        "alert", "background", "voip", "complication", "fileprovider",
        "mdm", "liveactivity", "location", "pushtotalk", "widgets", "controls",
    ]
    static let payloadLimit = 4096
    static let voipPayloadLimit = 5120
    static let maximumCollapseIDBytes = 64
    static let devicePathPrefix = "/3/device/"

    /// The request headers APNs looks at, read in one pass.
    struct RequestHead {
        var method: String?
        var path: String?
        var authorization: String?
        var topic: String?
        var pushType: String?
        var priority: String?
        var apnsID: String?
        var requestID: String?
        var channelID: String?
        var collapseID: String?
        var expiration: String?
        var hasRepeatedAPNSHeader = false

        init(_ headers: HPACKHeaders) {
            for (name, value, _) in headers {
                switch name {
                case ":method": self.method = value
                case ":path": self.path = value
                case "authorization": self.authorization = value
                case "apns-topic": Self.set(&self.topic, value, &self.hasRepeatedAPNSHeader)
                case "apns-push-type": Self.set(&self.pushType, value, &self.hasRepeatedAPNSHeader)
                case "apns-priority": Self.set(&self.priority, value, &self.hasRepeatedAPNSHeader)
                case "apns-id": Self.set(&self.apnsID, value, &self.hasRepeatedAPNSHeader)
                case "apns-request-id": Self.set(&self.requestID, value, &self.hasRepeatedAPNSHeader)
                case "apns-channel-id": Self.set(&self.channelID, value, &self.hasRepeatedAPNSHeader)
                case "apns-collapse-id": Self.set(&self.collapseID, value, &self.hasRepeatedAPNSHeader)
                case "apns-expiration": Self.set(&self.expiration, value, &self.hasRepeatedAPNSHeader)
                default: break
                }
            }
        }

        private static func set(_ field: inout String?, _ value: String, _ isRepeated: inout Bool) {
            if field != nil { isRepeated = true } else { field = value }
        }
    }

    /// Whether connections may authenticate with a client certificate or, without one, with
    /// provider tokens (both a client CA and provider keys are configured).
    var acceptsBothKindsOfProvider: Bool {
        configuration.clientCertificateAuthorityPath != nil && providerTokenVerifier.isEnabled
    }

    /// Decides the answer to one complete request, counts it and logs it.
    ///
    /// Checks run in Apple's order: method, path and device token, provider token (not for a
    /// request on a connection that presented a client certificate), the `apns-*` headers, the
    /// payload, then the token's registration.
    func answer(headers: HPACKHeaders, payload: ByteBuffer, payloadLength: Int, certificateAuthenticated: Bool = false) -> Answer {
        let head = RequestHead(headers)
        if let path = head.path, path.hasPrefix(Self.broadcastPathPrefix) || path.hasPrefix(Self.channelManagementPathPrefix) {
            return channelAnswer(head, headers: headers, payload: payload, payloadLength: payloadLength)
        }
        // Echo the request's apns-id; a missing or malformed one gets a fresh UUID, as APNs does.
        let requestedAPNSID = head.apnsID.flatMap { Encoding.isCanonicalUUID($0) ? $0 : nil }
        let apnsID = requestedAPNSID ?? Encoding.randomLowercaseUUID()

        var deviceToken: Substring = ""
        if let path = head.path, path.hasPrefix(Self.devicePathPrefix) {
            deviceToken = path.dropFirst(Self.devicePathPrefix.utf8.count)
        }
        let rejection = self.rejection(
            for: head,
            deviceToken: deviceToken,
            payloadLength: payloadLength,
            checksToken: !certificateAuthenticated
        )
        let tokenKey = Encoding.asciiLowercased(deviceToken)
        let requestedAPNSIDKey = requestedAPNSID.map { Encoding.asciiLowercased($0[...]) }

        var loggedRequest: ReceivedRequest?
        if self.configuration.requestLogLimit > 0 {
            loggedRequest = ReceivedRequest(
                token: String(deviceToken),
                headers: headers.map { (name: $0.name, value: $0.value) },
                payload: Array(payload.readableBytesView),
                status: 0,
                reason: nil,
                apnsID: apnsID
            )
        }

        let uniqueIDHeader = self.uniqueIDHeader
        let answer = self.ledger.withLockedValue { ledger -> Answer in
            let answer: Answer
            if ledger.faults.injectsStatuses, let fault = ledger.drawStatusFault() {
                answer = Answer(status: fault.status, apnsID: apnsID, reason: fault.rawValue)
            } else if let rejection {
                answer = Answer(status: rejection.status, apnsID: apnsID, reason: rejection.rawValue)
            } else if let millis = ledger.unregisteredTokens[tokenKey] {
                answer = Answer(
                    status: Rejection.unregistered.status,
                    apnsID: apnsID,
                    reason: Rejection.unregistered.rawValue,
                    unregisteredAt: millis
                )
            } else {
                answer = Answer(status: 200, apnsID: apnsID, headers: uniqueIDHeader)
                ledger.recordAccepted(token: tokenKey, requestedAPNSID: requestedAPNSIDKey)
            }
            ledger.countsByStatus[answer.status, default: 0] += 1
            if var loggedRequest {
                loggedRequest.status = answer.status
                loggedRequest.reason = answer.reason
                ledger.log(loggedRequest)
            }
            return answer
        }

        self.logger.trace(
            "mock APNs answered",
            metadata: [
                "mock_apns.status": "\(answer.status)",
                "mock_apns.token": "\(deviceToken)",
                "mock_apns.apns_id": "\(answer.apnsID)",
            ]
        )
        return answer
    }

    /// The latency to add before processing a request, if the faults select this request.
    func addedLatency(headers: HPACKHeaders) -> Duration? {
        guard let latency = self.ledger.withLockedValue({ $0.faults.latency }) else { return nil }
        var tokenKey: String?
        switch latency.scope.backing {
        case .everyRequest, .fraction: break
        case .firstRequestPerToken, .tokens:
            let path = headers.first(name: ":path") ?? ""
            let token = path.hasPrefix(Self.devicePathPrefix) ? path.dropFirst(Self.devicePathPrefix.utf8.count) : ""
            tokenKey = Encoding.asciiLowercased(token)
        }
        return self.ledger.withLockedValue { ledger in
            switch latency.scope.backing {
            case .everyRequest:
                break
            case .firstRequestPerToken:
                guard let tokenKey, ledger.tokensDelayedOnce.insert(tokenKey).inserted else { return nil }
            case .fraction(let share):
                guard ledger.random.nextUnitInterval() < share else { return nil }
            case .tokens(let tokens):
                guard let tokenKey, tokens.contains(tokenKey) else { return nil }
            }
            return ledger.drawLatency(latency)
        }
    }

    /// `apns-unique-id` with a fresh UUID when the mock plays the development environment (the
    /// header table of "Handling notification responses from APNs": development only).
    var uniqueIDHeader: [(name: String, value: String)] {
        configuration.returnsUniqueIDs ? [("apns-unique-id", Encoding.randomLowercaseUUID())] : []
    }

    /// The provider-token rejection, if the server checks tokens and this one fails.
    func providerTokenRejection(_ head: RequestHead) -> Rejection? {
        guard self.providerTokenVerifier.isEnabled else { return nil }
        return self.providerTokenVerifier.rejection(
            forAuthorization: head.authorization,
            nowSeconds: configuration.wallClockMilliseconds() / 1000
        )
    }

    /// The rejection APNs would give before looking at the device's registration, if any.
    private func rejection(for head: RequestHead, deviceToken: Substring, payloadLength: Int, checksToken: Bool) -> Rejection? {
        guard head.method == "POST" else { return .methodNotAllowed }
        guard let path = head.path, path.hasPrefix(Self.devicePathPrefix) else { return .badPath }
        guard !deviceToken.isEmpty else { return .missingDeviceToken }
        guard Encoding.isEvenLengthHex(deviceToken) else { return .badDeviceToken }

        if checksToken, let rejection = providerTokenRejection(head) { return rejection }

        guard head.topic != nil else { return .missingTopic }
        if let pushType = head.pushType, !Self.knownPushTypes.contains(pushType) { return .invalidPushType }
        if let priority = head.priority, priority != "10", priority != "5", priority != "1" { return .badPriority }
        if let apnsID = head.apnsID, !Encoding.isCanonicalUUID(apnsID) { return .badMessageId }
        if let collapseID = head.collapseID, collapseID.utf8.count > Self.maximumCollapseIDBytes { return .badCollapseId }
        if let expiration = head.expiration, Int64(expiration) == nil { return .badExpirationDate }
        if head.hasRepeatedAPNSHeader { return .duplicateHeaders }

        guard payloadLength > 0 else { return .payloadEmpty }
        let limit = head.pushType == "voip" ? Self.voipPayloadLimit : Self.payloadLimit
        guard payloadLength <= limit else { return .payloadTooLarge }
        return nil
    }
}

/// Counters, seen apns-ids, unregistered tokens, the fault generator and the request log, kept
/// behind one lock.
struct Ledger: Sendable {
    var unregisteredTokens: [String: Int64] = [:]
    /// Broadcast channels by bundle ID: channel ID to message storage policy, and creation order.
    var channels: [String: [String: Int]] = [:]
    var channelOrder: [String: [String]] = [:]
    /// Accepted broadcasts by channel ID.
    var broadcastsByChannel: [String: Int] = [:]
    var acceptedPushesByToken: [String: Int] = [:]
    var totalAcceptedPushes = 0
    var countsByStatus: [Int: Int] = [:]
    var acceptedAPNSIDs: Set<String> = []
    var repeatedAPNSIDCount = 0
    var streams = MockAPNSServer.StreamStatistics()
    /// Tokens that already had their one delayed request (latency scope `firstRequestPerToken`).
    var tokensDelayedOnce: Set<String> = []
    var random: SeededRandomNumberGenerator
    private(set) var requestLog: RequestLog
    /// The error statuses and latency injected now (set at start, changed by ``MockAPNSServer/setFaults(_:)``).
    var faults: MockAPNSFaults

    init(requestLogLimit: Int, seed: UInt64, faults: MockAPNSFaults) {
        self.requestLog = RequestLog(capacity: requestLogLimit)
        self.random = SeededRandomNumberGenerator(seed: seed)
        self.faults = faults
    }

    /// One draw per request: the injected error status, or nil to answer normally.
    mutating func drawStatusFault() -> Rejection? {
        let draw = self.random.nextUnitInterval()
        var bound = faults.tooManyRequestsFraction
        if draw < bound { return .tooManyRequests }
        bound += faults.internalServerErrorFraction
        if draw < bound { return .internalServerError }
        bound += faults.serviceUnavailableFraction
        if draw < bound { return .serviceUnavailable }
        return nil
    }

    /// A delay drawn uniformly from the latency's range.
    mutating func drawLatency(_ latency: MockAPNSFaults.Latency) -> Duration {
        let minimum = Self.nanoseconds(latency.minimum)
        let maximum = Self.nanoseconds(latency.maximum)
        guard maximum > minimum else { return .nanoseconds(minimum) }
        return .nanoseconds(Int64.random(in: minimum...maximum, using: &self.random))
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return min(seconds, 86_400) * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    mutating func recordAccepted(token: String, requestedAPNSID: String?) {
        self.acceptedPushesByToken[token, default: 0] += 1
        self.totalAcceptedPushes += 1
        if let requestedAPNSID, !self.acceptedAPNSIDs.insert(requestedAPNSID).inserted {
            self.repeatedAPNSIDCount += 1
        }
    }

    mutating func log(_ request: MockAPNSServer.ReceivedRequest) {
        self.requestLog.append(request)
    }

    mutating func reset() {
        self.broadcastsByChannel.removeAll()
        self.acceptedPushesByToken.removeAll()
        self.totalAcceptedPushes = 0
        self.countsByStatus.removeAll()
        self.acceptedAPNSIDs.removeAll()
        self.repeatedAPNSIDCount = 0
        self.streams = MockAPNSServer.StreamStatistics()
        self.tokensDelayedOnce.removeAll()
        self.requestLog.removeAll()
    }
}

/// A fixed-capacity ring buffer holding the most recent requests, so logging stays O(1) per
/// request even when the log is full.
struct RequestLog: Sendable {
    private var storage: [MockAPNSServer.ReceivedRequest] = []
    /// Index of the oldest entry once `storage` is full.
    private var oldestIndex = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
    }

    mutating func append(_ request: MockAPNSServer.ReceivedRequest) {
        guard self.capacity > 0 else { return }
        if self.storage.count < self.capacity {
            self.storage.append(request)
        } else {
            self.storage[self.oldestIndex] = request
            self.oldestIndex = (self.oldestIndex + 1) % self.capacity
        }
    }

    mutating func removeAll() {
        self.storage.removeAll()
        self.oldestIndex = 0
    }

    /// The entries, oldest first.
    var inArrivalOrder: [MockAPNSServer.ReceivedRequest] {
        Array(self.storage[self.oldestIndex...] + self.storage[..<self.oldestIndex])
    }
}
