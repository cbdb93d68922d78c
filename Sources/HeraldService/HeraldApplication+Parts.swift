import APNSHTTP2
import FCMHTTP
import WebPushCore
import WebPushHTTP
import KafkaMessages
import KafkaTransport
import Logging
import Metrics
import Prometheus
import PushPipeline

/// The push clients of one Herald: APNs for devices, broadcasts and channel management, FCM and
/// web push when configured, and the reloader of the credentials file they share.
struct PushClients {
    let apns: APNSHTTP2Client
    /// nil: broadcasts go through ``apns``'s hosts.
    let broadcastAPNS: APNSHTTP2Client?
    let channelsAPNS: APNSHTTP2Client
    /// Every APNs client, for the reloader and the service group.
    let apnsClients: [APNSHTTP2Client]
    let fcm: FCMHTTPClient?
    let webPush: WebPushHTTPClient?
    let credentialsReloader: CredentialsReloader

    init(configuration: HeraldConfiguration, apns apnsConfiguration: APNSClientConfiguration, metricsFactory: PrometheusMetricsFactory, logger: Logger) throws {
        apns = try APNSHTTP2Client(configuration: apnsConfiguration, metricsFactory: metricsFactory, logger: logger)
        // Broadcasts use the device hosts unless HERALD_APNS_BROADCAST_* names others; channel
        // management has hosts of its own. Each client connects only once it has a request.
        func client(for endpoints: (production: APNSClientConfiguration.Endpoint, sandbox: APNSClientConfiguration.Endpoint)) throws
            -> APNSHTTP2Client
        {
            var clientConfiguration = apnsConfiguration
            (clientConfiguration.production, clientConfiguration.sandbox) = endpoints
            return try APNSHTTP2Client(configuration: clientConfiguration, metricsFactory: metricsFactory, logger: logger)
        }
        broadcastAPNS = try configuration.broadcastEndpoints.map(client(for:))
        channelsAPNS = try client(for: configuration.channelManagementEndpoints)
        apnsClients = [apns, channelsAPNS] + (broadcastAPNS.map { [$0] } ?? [])
        // Only when an FCM credential is configured: without one, Android devices get rejected
        // results (NoCredentialForPackage) and nothing about FCM runs.
        let fcm = try configuration.fcm.map { fcmConfiguration -> FCMHTTPClient in
            do {
                return try FCMHTTPClient(configuration: fcmConfiguration, metricsFactory: metricsFactory, logger: logger)
            } catch {
                throw ConfigurationError("FCM client: \(error)")
            }
        }
        self.fcm = fcm
        // Only with a VAPID key: without one, browsers get rejected results (NoCredentialForApp).
        let webPush = try configuration.webPush.map { webPushConfiguration -> WebPushHTTPClient in
            do {
                return try WebPushHTTPClient(configuration: webPushConfiguration, metricsFactory: metricsFactory, logger: logger)
            } catch {
                throw ConfigurationError("web push client: \(error)")
            }
        }
        self.webPush = webPush
        credentialsReloader = CredentialsReloader(
            path: configuration.credentialsFile,
            defaultCredential: apnsConfiguration.authentication,
            clients: apnsClients,
            fcm: fcm.flatMap { client in configuration.fcm.map { .init(client: client, credentials: $0.credentials, fallbackPath: $0.fallbackPath) } },
            webPush: webPush.flatMap { client in configuration.webPush.map { .init(client: client, fallback: $0.credentials.fallback) } },
            checkInterval: configuration.credentialsCheckInterval,
            metricsFactory: metricsFactory,
            logger: logger
        )
    }
}

/// What readiness and the metrics endpoint ask.
struct HealthProbes {
    let pipeline: NotificationPipeline
    let consumer: KafkaConsumer
    let bulkConsumer: KafkaConsumer
    let producer: KafkaProducer
    let clients: PushClients
    let database: SingleFlightProbe
}

extension HeraldApplication {
    /// /health and /ready from `probes` (readiness also recorded as `herald_ready`), and
    /// /metrics with the gauges refreshed at each scrape.
    static func makeHealthServer(
        configuration: HeraldConfiguration,
        probes: HealthProbes,
        metrics: PrometheusCollectorRegistry,
        metricsFactory: PrometheusMetricsFactory,
        drain: DrainSignal,
        logger: Logger
    ) -> HealthServer {
        let ready = Gauge(label: "herald_ready", factory: metricsFactory)
        let bulkTopic = configuration.pipeline.topics.bulkRequests
        let kafkaMetrics = KafkaMetrics(factory: metricsFactory, bulkTopic: bulkTopic)
        let (pipeline, consumer, bulkConsumer, producer) = (probes.pipeline, probes.consumer, probes.bulkConsumer, probes.producer)
        let (apns, fcm, database) = (probes.clients.apns, probes.clients.fcm, probes.database)
        /// The unmet conditions, also recorded as `herald_ready` (1 or 0).
        let readiness: @Sendable () async -> [String] = {
            let unmet = await Readiness.unmetConditions(
                draining: drain.hasBegun,
                consuming: pipeline.isConsuming,
                joinedGroup: consumer.hasJoinedGroup,
                publishBlockedBy: pipeline.publishBlockedBy,
                storeBlockedBy: pipeline.storeBlockedBy,
                apnsReachable: apns.endpointsReachable,
                fcmTokenAvailable: fcm?.isReady ?? true,
                database: { await database.check() }
            )
            ready.record(unmet.isEmpty ? 1 : 0)
            return unmet
        }
        return HealthServer(
            port: configuration.httpPort,
            readiness: readiness,
            metrics: {
                _ = await readiness()
                // The device client's; the channel clients' gauges would share its `host` labels
                // when their hosts are the same (a mock, or HERALD_APNS_BROADCAST_* unchanged).
                apns.recordPoolState()
                fcm?.recordPoolState()
                probes.clients.webPush?.recordPoolState()
                kafkaMetrics.refresh(
                    producerQueue: producer.queuedRecords,
                    committed: pipeline.committedOffsets,
                    highWatermark: { $0.topic == bulkTopic ? bulkConsumer.highWatermark($0) : consumer.highWatermark($0) }
                )
                return metrics.emitToString()
            },
            drain: drain,
            logger: logger
        )
    }
}
