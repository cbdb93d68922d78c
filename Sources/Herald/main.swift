import JSONCore
import PushCore
import ArgumentParser
import Foundation
import HeraldService
import Logging
import PushPipeline

/// `herald`: delivers Apple push notifications for events on Kafka.
@main
struct Herald: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Delivers push notifications (APNs, FCM, Web Push) for notification events on Kafka.",
        discussion: "Configured by HERALD_* environment variables and the YAML or JSON file HERALD_CONFIG_FILE names (see docs/configuration.md).",
        subcommands: [Run.self, Migrate.self, Config.self, Token.self, Send.self, Channel.self],
        defaultSubcommand: Run.self
    )

    /// Reads the configuration, or exits with code 2 and one line naming the problem; logs the
    /// unknown keys and certificate problems the reading found.
    static func loadConfiguration() async -> HeraldConfiguration {
        await loadConfigurationAndReport().configuration
    }

    /// ``loadConfiguration()``, with what the reading found, for `herald config check` to print.
    static func loadConfigurationAndReport() async -> (configuration: HeraldConfiguration, report: ConfigurationReport) {
        do {
            let (configuration, report) = try await HeraldConfiguration.read(environment: ProcessInfo.processInfo.environment)
            configuration.bootstrapLogging()
            for unknown in report.unknownKeys {
                Logger(label: "herald").warning("unknown configuration key ignored: \(unknown)")
            }
            for problem in report.certificateProblems {
                Logger(label: "herald").error("APNs certificate: \(problem)")
            }
            return (configuration, report)
        } catch {
            FileHandle.standardError.write(Data("herald: configuration error: \(error)\n".utf8))
            Foundation.exit(2)
        }
    }

    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Run the service until SIGTERM or SIGINT.")

        func run() async throws {
            let configuration = await Herald.loadConfiguration()
            let logger = Logger(label: "herald")
            do {
                try await HeraldApplication.run(configuration: configuration, logger: logger)
            } catch let error as ConfigurationError {
                FileHandle.standardError.write(Data("herald: configuration error: \(error)\n".utf8))
                throw ExitCode(2)
            }
        }
    }

    struct Config: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Configuration commands.",
            subcommands: [Check.self]
        )

        struct Check: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Validate the configuration and print it, secrets left out; exit 0, or 2 naming the problem."
            )

            func run() async throws {
                let (configuration, report) = await Herald.loadConfigurationAndReport()
                for line in OperatorCommands.describe(configuration, report: report) { print(line) }
                print("configuration ok")
            }
        }
    }

    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish a token registry update to push.tokens (as an app's API would).",
            subcommands: [Register.self, Unregister.self]
        )

        struct Register: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Register a device token for a user of an app.")
            @Option(help: "The user ID.") var user: String
            @Option(help: "The app's bundle ID (for fcm: the Android package).") var topic: String
            @Option(help: "The device token (APNs: hex; FCM: as the app got it).") var token: String
            @Option(help: "production or sandbox (APNs).") var environment = "production"
            @Option(help: "apns or fcm.") var platform = "apns"
            @Option(help: "For fcm: token (a registration token) or fid (a Firebase Installation ID).") var fcmTarget: String?

            func run() async throws {
                try await Herald.publishToken(
                    register: true, user: user, token: token, topic: topic, environment: environment, platform: platform, fcmTarget: fcmTarget
                )
            }
        }

        struct Unregister: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Unregister a device token of an app.")
            @Option(help: "The app's bundle ID (for fcm: the Android package).") var topic: String
            @Option(help: "The device token.") var token: String
            @Option(help: "apns or fcm.") var platform = "apns"

            func run() async throws {
                try await Herald.publishToken(
                    register: false, user: nil, token: token, topic: topic, environment: "production", platform: platform, fcmTarget: nil
                )
            }
        }
    }

    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish a test alert for a user to push.requests and print its results (a smoke test against a running Herald)."
        )
        @Option(help: "The user ID.") var user: String
        @Option(help: "The app's bundle ID: its APNs devices get the alert.") var topic: String?
        @Option(help: "The Android package: its FCM devices get the alert.") var package: String?
        @Option(help: "The alert text.") var alert: String
        @Option(help: "Seconds to wait for results.") var timeout = 30

        func run() async throws {
            let configuration = await Herald.loadConfiguration()
            let lines = try await Herald.refusingBadInput {
                try await OperatorCommands.sendTestAlert(
                    user: user,
                    topic: topic,
                    package: package,
                    alert: alert,
                    timeout: .seconds(timeout),
                    configuration: configuration,
                    logger: Logger(label: "herald.send")
                )
            }
            for line in lines { print(line) }
            if lines.last?.hasPrefix("no result") == true { throw ExitCode(1) }
        }
    }

    struct Channel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Manage an app's Live Activity broadcast channels through Apple's channel management API.",
            discussion: "Prints the answer as push.channel-results JSON; exits 1 unless its status is ok.",
            subcommands: [Create.self, Read.self, Delete.self, List.self]
        )

        struct App: ParsableArguments {
            @Option(help: "The app's bundle ID.") var topic: String
            @Option(help: "production or sandbox.") var environment = "production"
        }

        struct Create: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Create a channel.")
            @OptionGroup var app: App
            @Option(help: "0: keep no message; 1: keep the last one for new subscribers.") var storagePolicy = 0
            func run() async throws {
                try await Channel.perform(.create, app, storagePolicy: storagePolicy)
            }
        }

        struct Read: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Read a channel's settings.")
            @OptionGroup var app: App
            @Option(help: "The channel ID (base64).") var channelID: String
            func run() async throws { try await Channel.perform(.read, app, channelID: channelID) }
        }

        struct Delete: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Delete a channel.")
            @OptionGroup var app: App
            @Option(help: "The channel ID (base64).") var channelID: String
            func run() async throws { try await Channel.perform(.delete, app, channelID: channelID) }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List the app's channels.")
            @OptionGroup var app: App
            func run() async throws { try await Channel.perform(.list, app) }
        }

        /// Validates the command as push.channels would, performs it and prints the answer.
        static func perform(
            _ action: ChannelCommand.Action,
            _ app: App,
            storagePolicy: Int? = nil,
            channelID: String? = nil
        ) async throws {
            let configuration = await Herald.loadConfiguration()
            var fields: [JSONValue.Member] = [
                .init("request_id", .string("herald-channel-\(UUID().uuidString.lowercased())")),
                .init("action", .string(action.rawValue)), .init("topic", .string(app.topic)), .init("environment", .string(app.environment)),
            ]
            if let storagePolicy { fields.append(.init("message_storage_policy", .number(String(storagePolicy)))) }
            if let channelID { fields.append(.init("channel_id", .string(channelID))) }
            let result = try await refusingBadInput {
                let command = try ChannelCommand(json: JSONValue.object(fields).serialized())
                return try await OperatorCommands.manageChannel(
                    command,
                    configuration: configuration,
                    logger: Logger(label: "herald.channel")
                )
            }
            print(String(decoding: result.json(), as: UTF8.self))
            if result.status != .ok { throw ExitCode(1) }
        }
    }

    static func publishToken(
        register: Bool,
        user: String?,
        token: String,
        topic: String,
        environment: String,
        platform: String,
        fcmTarget: String?
    ) async throws {
        let configuration = await Herald.loadConfiguration()
        let line = try await refusingBadInput {
            try await OperatorCommands.publishTokenUpdate(
                register: register,
                user: user,
                token: token,
                topic: topic,
                environment: environment,
                platform: platform,
                fcmTarget: fcmTarget,
                configuration: configuration,
                logger: Logger(label: "herald.token")
            )
        }
        print(line)
    }

    /// Runs `body`; input Herald would dead-letter exits 2 with its code and detail.
    static func refusingBadInput<Result>(_ body: () async throws -> Result) async throws -> Result {
        do {
            return try await body()
        } catch let rejection as InputRejection {
            FileHandle.standardError.write(Data("herald: refused: \(rejection.code.rawValue): \(rejection.detail)\n".utf8))
            throw ExitCode(2)
        }
    }

    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Apply the PostgreSQL schema migrations.")

        func run() async throws {
            let configuration = await Herald.loadConfiguration()
            try await HeraldApplication.migrate(configuration: configuration, logger: Logger(label: "herald.migrate"))
        }
    }
}
