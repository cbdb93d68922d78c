import Crypto
import Foundation
import MockServerSupport
import NIOCore
import Synchronization

extension MockWebPushServer {
    /// A subscription as the mock (the browser) keeps it: with its private key.
    struct Subscription: Sendable {
        var endpoint: String
        var privateKey: P256.KeyAgreement.PrivateKey
        var auth: [UInt8]
        /// The VAPID public key (uncompressed point) it is bound to; nil accepts any.
        var applicationServerKey: [UInt8]?
        /// Answered 410 from now on.
        var gone = false
    }

    /// Subscriptions, scripts, counters and the delivery log, behind the server's lock.
    struct Ledger {
        var subscriptions: [String: Subscription] = [:]
        var scripts: [String: [MockWebPushAnswer]] = [:]
        var generator: SeededRandomNumberGenerator
        var requests = 0
        var deliveries = 0
        var answersByStatus: [Int: Int] = [:]
        var deliveriesByEndpoint: [String: Int] = [:]
        var connectionsByOrigin: [String: Int] = [:]
        var log = CircularBuffer<MockWebPushDelivery>()
        var logLimit: Int

        mutating func record(_ delivery: MockWebPushDelivery) {
            deliveries += 1
            deliveriesByEndpoint[delivery.endpoint, default: 0] += 1
            guard logLimit > 0 else { return }
            if log.count >= logLimit { log.removeFirst(log.count - logLimit + 1) }
            log.append(delivery)
        }

        mutating func randomBytes(_ count: Int) -> [UInt8] {
            (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        }

        /// A key pair from the seeded generator, so a seeded run makes the same subscriptions.
        mutating func makeKeyPair() -> P256.KeyAgreement.PrivateKey {
            // A scalar outside 1..<n is refused; that is about one draw in 2^32.
            while true {
                if let key = try? P256.KeyAgreement.PrivateKey(rawRepresentation: randomBytes(32)) { return key }
            }
        }

        /// A version 4 UUID, lowercase, from the seeded generator.
        mutating func makeUUID() -> String {
            var bytes = randomBytes(16)
            bytes[6] = bytes[6] & 0x0F | 0x40
            bytes[8] = bytes[8] & 0x3F | 0x80
            let digits = Array("0123456789abcdef")
            var text = ""
            for (index, byte) in bytes.enumerated() {
                if [4, 6, 8, 10].contains(index) { text.append("-") }
                text.append(digits[Int(byte >> 4)])
                text.append(digits[Int(byte & 0x0F)])
            }
            return text
        }
    }

    // MARK: Subscriptions

    /// A new subscription on origin `index` (in ``MockWebPushConfiguration/ports`` order), as a
    /// browser's `pushManager.subscribe()` makes one: a fresh key pair and authentication secret,
    /// bound to `applicationServerKey` (base64url of the VAPID public key) when given.
    ///
    /// Throws ``MockWebPushServerError/notListening`` before ``run()`` has bound the ports.
    public func subscribe(origin index: Int, applicationServerKey: String? = nil) throws -> MockWebPushSubscription {
        let ports = try boundPorts()
        guard ports.indices.contains(index) else { throw MockWebPushServerError.noSuchOrigin }
        var boundKey: [UInt8]?
        if let applicationServerKey {
            guard let key = Self.applicationServerKey(applicationServerKey) else { throw MockWebPushServerError.badApplicationServerKey }
            boundKey = key
        }
        return makeSubscription(origin: Self.origin(host: configuration.host, port: ports[index]), applicationServerKey: boundKey)
    }

    /// A new subscription on `origin`, bound to the key given as an uncompressed point.
    func makeSubscription(origin: String, applicationServerKey: [UInt8]?) -> MockWebPushSubscription {
        let subscription = ledger.withLock { ledger -> Subscription in
            let id = MockBase64URL.encode(ledger.randomBytes(16))
            let made = Subscription(
                endpoint: "\(origin)/push/\(id)",
                privateKey: ledger.makeKeyPair(),
                auth: ledger.randomBytes(16),
                applicationServerKey: applicationServerKey
            )
            ledger.subscriptions[made.endpoint] = made
            return made
        }
        return MockWebPushSubscription(
            endpoint: subscription.endpoint,
            p256dh: MockBase64URL.encode(Array(subscription.privateKey.publicKey.x963Representation)),
            auth: MockBase64URL.encode(subscription.auth),
            applicationServerKey: applicationServerKey.map { MockBase64URL.encode($0) }
        )
    }

    /// The bytes of a base64url application server key, when it is an uncompressed P-256 point.
    static func applicationServerKey(_ text: some StringProtocol) -> [UInt8]? {
        guard let key = MockBase64URL.decode(text), key.count == 65, key.first == 4,
            (try? P256.Signing.PublicKey(x963Representation: key)) != nil
        else { return nil }
        return key
    }

    // MARK: Faults

    /// The next requests to `endpoint` that pass every check get `answers`, one each, in order,
    /// before messages are accepted again. A consumed answer is not a delivery.
    public func script(endpoint: String, answers: [MockWebPushAnswer]) {
        ledger.withLock { $0.scripts[endpoint, default: []] += answers }
    }

    /// The subscription is gone from now on: every request to `endpoint` answers 410.
    public func expire(endpoint: String) {
        ledger.withLock { ledger in
            if var subscription = ledger.subscriptions[endpoint] {
                subscription.gone = true
                ledger.subscriptions[endpoint] = subscription
            }
        }
    }

    // MARK: Observing

    /// The messages accepted for `endpoint`, oldest first, as far as the log keeps them
    /// (``MockWebPushConfiguration/requestLogLimit`` over all endpoints).
    public func deliveries(endpoint: String) -> [MockWebPushDelivery] {
        ledger.withLock { ledger in ledger.log.filter { $0.endpoint == endpoint } }
    }

    /// The messages accepted for `endpoint`, whatever the log keeps.
    public func deliveryCount(endpoint: String) -> Int {
        ledger.withLock { $0.deliveriesByEndpoint[endpoint] ?? 0 }
    }

    /// The counters so far.
    public var stats: MockWebPushStats {
        ledger.withLock { ledger in
            MockWebPushStats(
                requests: ledger.requests,
                deliveries: ledger.deliveries,
                answersByStatus: ledger.answersByStatus,
                deliveriesByEndpoint: ledger.deliveriesByEndpoint,
                connectionsByOrigin: ledger.connectionsByOrigin
            )
        }
    }
}
