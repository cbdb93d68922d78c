import JSONCore
import Logging
import MockServerSupport
import NIOHPACK
import Synchronization

extension MockWebPushServer {
    /// One complete request as the connection received it.
    struct Request {
        var method: String
        var path: String
        /// The origin of the port it arrived on, `https://<host>:<port>`.
        var origin: String
        var headers: HPACKHeaders
        /// The body, kept up to ``MockWebPushConfiguration/maximumBodyBytes``.
        var body: [UInt8]
        /// The body's full length, also counting bytes beyond what is kept.
        var bodyLength: Int
    }

    /// Routes one request: `POST /push/<id>` (the push endpoint, counted), `POST /subscribe`,
    /// `GET /stats`; anything else is 404.
    func answer(_ request: Request) -> MockWebPushReply {
        let parts = request.path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let route = parts.first ?? ""
        let query = parts.count > 1 ? parts[1] : ""
        if request.method == "POST", route.hasPrefix("/push/") {
            let reply = pushReply(request, endpoint: request.origin + String(route))
            ledger.withLock { ledger in
                ledger.requests += 1
                ledger.answersByStatus[reply.status, default: 0] += 1
            }
            logger.trace("mock web push answered", metadata: ["mock_webpush.path": "\(route)", "mock_webpush.status": "\(reply.status)"])
            return reply
        }
        if request.method == "POST", route == "/subscribe" { return subscribeReply(origin: request.origin, query: query) }
        if request.method == "GET", route == "/stats" { return statsReply() }
        return .notFound
    }

    /// The push endpoint's checks, in order: the subscription, VAPID, the headers, the size, the
    /// encryption; then a scripted answer, or 201 and a delivery.
    private func pushReply(_ request: Request, endpoint: String) -> MockWebPushReply {
        // autopush looks the subscription up before anything else (its Subscription extractor
        // runs first, autoendpoint/src/extractors/notification.rs).
        guard let subscription = ledger.withLock({ $0.subscriptions[endpoint] }) else { return .endpointNotFound }
        guard !subscription.gone else { return .subscriptionGone }

        let headers = request.headers
        let nowSeconds = MockWallClock.millisecondsSince1970() / 1000
        var vapid = MockWebPushVAPID.Verified(subject: "", audience: "", publicKey: [])
        if configuration.checksCryptography {
            switch MockWebPushVAPID.verify(authorization: headers.first(name: "authorization"), origin: request.origin, nowSeconds: nowSeconds) {
            case .failure(.absent): return .unauthorized
            case .failure(.badToken): return .badJwtToken
            case .success(let verified): vapid = verified
            }
            if let bound = subscription.applicationServerKey, bound != vapid.publicKey { return .vapidKeyMismatch }
        } else if headers.first(name: "authorization")?.hasPrefix("vapid ") != true {
            return .unauthorized
        }

        // RFC 8030 §5.2: TTL is a number of seconds, required.
        guard let ttlText = headers.first(name: "ttl") else { return .missingTTL }
        guard !ttlText.isEmpty, ttlText.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let ttl = Int(ttlText)
        else { return .invalidTTL }
        // RFC 8291 §4 and RFC 8188 §2: the content coding is `aes128gcm` (codings are
        // case-insensitive, RFC 9110 §8.4.1).
        guard headers.first(name: "content-encoding")?.lowercased() == "aes128gcm" else { return .badContentEncoding }
        let topic = headers.first(name: "topic")
        if let topic, topic.isEmpty || topic.utf8.count > 32 || !topic.utf8.allSatisfy(MockBase64URL.isAlphabet) {
            return .invalidTopic
        }
        let urgency = headers.first(name: "urgency")
        if let urgency, !["very-low", "low", "normal", "high"].contains(urgency) { return .invalidUrgency }

        guard request.bodyLength <= configuration.maximumBodyBytes else { return .payloadTooLarge }
        let decrypted =
            configuration.checksCryptography
            ? MockWebPushDecryption.decrypt(request.body, privateKey: subscription.privateKey, auth: subscription.auth) : []
        guard let plaintext = decrypted else { return .badEncryption }

        return ledger.withLock { ledger -> MockWebPushReply in
            if var queue = ledger.scripts[endpoint], !queue.isEmpty {
                let scripted = queue.removeFirst()
                ledger.scripts[endpoint] = queue.isEmpty ? nil : queue
                switch scripted {
                case .status(let status, let retryAfterSeconds): return .scripted(status, retryAfterSeconds: retryAfterSeconds)
                case .notFound: return .endpointNotFound
                case .gone:
                    ledger.subscriptions[endpoint]?.gone = true
                    return .subscriptionGone
                }
            }
            ledger.record(
                MockWebPushDelivery(
                    endpoint: endpoint, plaintext: plaintext, ttl: ttl, urgency: urgency, topic: topic,
                    vapidSubject: vapid.subject, vapidAudience: vapid.audience, origin: request.origin
                )
            )
            // RFC 8030 §5: 201 Created with the push message's URL in Location; §5.2: the TTL
            // header answers with the TTL the service keeps.
            let location = "\(request.origin)/message/\(ledger.makeUUID())"
            return MockWebPushReply(status: 201, headers: [("location", location), ("ttl", String(ttl))])
        }
    }

    /// `POST /subscribe[?applicationServerKey=<base64url>]`: a subscription on the origin the
    /// request arrived on, as `PushSubscription.toJSON()` gives it (the Push API's
    /// PushSubscriptionJSON: `endpoint` and `keys.p256dh`, `keys.auth`).
    private func subscribeReply(origin: String, query: Substring) -> MockWebPushReply {
        var boundKey: [UInt8]?
        for field in query.split(separator: "&") {
            let pair = field.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2, pair[0] == "applicationServerKey" else { continue }
            guard let key = Self.applicationServerKey(pair[1]) else {
                return .autopush(400, errno: nil, message: "applicationServerKey is not base64url of an uncompressed P-256 point")
            }
            boundKey = key
        }
        let subscription = makeSubscription(origin: origin, applicationServerKey: boundKey)
        let keys = JSONValue.object([.init("p256dh", .string(subscription.p256dh)), .init("auth", .string(subscription.auth))])
        return .json(201, .object([.init("endpoint", .string(subscription.endpoint)), .init("keys", keys)]))
    }

    /// `GET /stats`: the counters as JSON, keys sorted.
    private func statsReply() -> MockWebPushReply {
        let stats = self.stats
        let byStatus = stats.answersByStatus.sorted { $0.key < $1.key }.map { JSONValue.Member(String($0.key), .number(String($0.value))) }
        let byEndpoint = stats.deliveriesByEndpoint.sorted { $0.key < $1.key }.map { JSONValue.Member($0.key, .number(String($0.value))) }
        return .json(
            200,
            .object([
                .init("requests", .number(String(stats.requests))),
                .init("deliveries", .number(String(stats.deliveries))),
                .init("by_status", .object(byStatus)),
                .init("deliveries_by_endpoint", .object(byEndpoint)),
            ])
        )
    }
}
