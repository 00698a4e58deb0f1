import ArgumentParser
import CloudKitWebServices
import Foundation
import Logging
import ZoneFeed
import ZoneFeedCloudKit

/// `zonefeed login PIPELINE.yml`: the browser sign-in of `cloudkit-web-services.md` §5.1, as
/// `gh auth login` does it (`field-notes.md` §8). CloudKit gives the sign-in address (the
/// `redirectURL` of a 421 to `users/caller` with the API token alone); the person signs in
/// there; CloudKit sends the browser to the API token's sign-in callback with `ckWebAuthToken`,
/// which a listener on 127.0.0.1 catches (or the person pastes the final address);
/// the token is checked with `users/caller` and stored in the pipeline's token store, where the
/// next run looks first. The token is never printed.
struct LoginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Sign in to CloudKit in a browser and store the web auth token where the pipeline's runs find it.",
        discussion: """
            Prints the sign-in address CloudKit gives, opens a browser where there is one, and waits on \
            http://127.0.0.1:8790/callback (--callback-port) for the browser to come back with the token: \
            set that address as the API token's sign-in callback in CloudKit Dashboard. On a machine without \
            a browser, --paste reads the address the browser ended at from stdin instead. At the callback, an \
            answer without a token, or with one CloudKit refuses, is said and waited past until --timeout (anyone \
            on the machine can call the callback). Exit codes: 0 signed in and stored; 2 usage or pipeline-file \
            error; 3 no sign-in within the time, or (--paste) the sign-in was cancelled or refused or CloudKit \
            refused the token; 1 anything else.
            """)

    @OptionGroup var options: PipelineOptions

    @Option(
        name: .customLong("callback-port"),
        help: "The loopback port the sign-in callback is caught on, 1 to 65535: the callback is http://127.0.0.1:PORT/callback.")
    var callbackPort = SignInCallbackListener.defaultPort

    @Flag(name: .customLong("no-browser"), help: "Do not open a browser; print the address only.")
    var noBrowser = false

    @Flag(help: "Read the address the browser ended at (with ckWebAuthToken) from stdin instead of listening for it.")
    var paste = false

    @Option(help: "How long to wait for the sign-in, in seconds (1 to 3600).")
    var timeout = 300

    static let timeoutRange = 1...3_600

    func validate() throws {
        try FlagRange.check("--callback-port", callbackPort, in: SignInCallbackListener.portRange)
        try FlagRange.check("--timeout", timeout, in: Self.timeoutRange, unit: "seconds")
    }

    func run() async throws {
        let pipeline = try options.loadPipeline()
        guard let settings = pipeline.source as? CloudKitSettings else {
            throw Self.stop("pipeline \(pipeline.name) reads no CloudKit container (its source is not source.cloudkit): it needs no sign-in", Exit.usage)
        }
        guard settings.signsIn else {
            throw Self.stop(
                "pipeline \(pipeline.name) reads the public database, which has no user to sign in: "
                    + "it reads with its server-to-server key (auth.serverKey), or the API token alone", Exit.usage)
        }
        let logger = options.makeLogger(for: pipeline)
        var configuration: CloudKitClient.Configuration
        do {
            configuration = try CloudKitSource.clientConfiguration(for: settings)
        } catch {
            throw Self.stop("\(error)", Exit.usage)
        }

        let address: String
        do {
            address = try await CloudKitClient.signInAddress(configuration: configuration, logger: logger)
        } catch let error as CloudKitError where error.isAuthenticationFailure {
            throw Self.stop("CloudKit refused to start a sign-in: \(error)", Exit.authentication)
        } catch {
            throw Self.stop("could not ask CloudKit where to sign in: \(error)", Exit.failed)
        }

        // A pasted address is one answer; the callback takes answers until one signs in.
        let signIn = { (callback: SignInCallback) async throws -> (UserIdentity, String) in
            try await self.signIn(with: callback, settings: settings, pipeline: pipeline, configuration: configuration, logger: logger)
        }
        let (user, location): (UserIdentity, String)
        do {
            (user, location) = paste ? try await signIn(try await pasted(address: address)) : try await caught(address: address, logger: logger, signIn)
        } catch let refusal as SignInRefusal {
            throw Self.stop("\(refusal.sentence). To try again: \(Self.command(pipelineFile: options.pipelineFile))", refusal.code)
        }
        var who = user.userRecordName
        let name = [user.givenName, user.familyName].compactMap { $0 }.joined(separator: " ")
        if !name.isEmpty { who += " (\(name))" }
        Self.say("Signed in as \(InertText.escaped(who)).")
        Self.say("The web auth token is stored in \(InertText.escaped(location)); the next run of \(InertText.escaped(options.pipelineFile)) uses it.")
    }

    /// Why a sign-in gave no token, as a person reads it.
    static func why(_ error: String?) -> String {
        switch error {
        case "cancelled"?: "the sign-in was cancelled in the browser"
        case "refused"?: "CloudKit refused the sign-in"
        case let other?: "the sign-in did not complete (\(InertText.escaped(other.prefix(200))))"
        case nil: "the address has no ckWebAuthToken: the sign-in did not complete"
        }
    }

    /// Checks the token a callback or a pasted address brings and stores it; throws the exit of a
    /// sign-in that brought none, or whose token CloudKit refused (`SignInRefusal`, exit 3), or
    /// that could not be checked or stored (exit 1).
    private func signIn(
        with callback: SignInCallback, settings: CloudKitSettings, pipeline: Pipeline, configuration: CloudKitClient.Configuration, logger: Logger
    ) async throws -> (UserIdentity, String) {
        let token: String
        switch callback {
        case .token(let value):
            token = value
        case .noToken(let error):
            throw SignInRefusal(sentence: "\(Self.why(error)); nothing was stored")
        }
        do {
            return try await store(token, settings: settings, pipeline: pipeline, configuration: configuration, logger: logger)
        } catch let error as CloudKitError where error.isAuthenticationFailure {
            throw SignInRefusal(sentence: "CloudKit refused the token the sign-in gave (\(error.code)); the stored tokens are as they were")
        } catch let error as ExitCode {
            throw error
        } catch {
            throw SignInRefusal(
                sentence: "the sign-in could not be checked or stored (\(error)); the stored tokens are as they were", code: Exit.failed)
        }
    }

    /// A sign-in that brought no token CloudKit takes, or whose token could not be checked: the
    /// pasted one ends login (with `code`); at the callback, login waits for the next, whatever
    /// the cause (a forged token CloudKit answers otherwise than with a refusal must not end
    /// login and free the port either).
    struct SignInRefusal: Error {
        var sentence: String
        var code = Exit.authentication
    }

    /// Listens on the loopback callback, prints the address and opens a browser once it listens,
    /// and signs in with what comes back: an answer without a token, or with one CloudKit
    /// refuses (a forged request from another process or a web page, or a cancelled sign-in),
    /// is said and waited past, so that the port is held, and the real sign-in caught, until
    /// one signs in or the time is up.
    private func caught(
        address: String, logger: Logger, _ signIn: (SignInCallback) async throws -> (UserIdentity, String)
    ) async throws -> (UserIdentity, String) {
        let listener = SignInCallbackListener(port: callbackPort)
        let openBrowser = !noBrowser
        let seconds = timeout
        let result: (UserIdentity, String)?
        var lastRefusal: String?
        do {
            result = try await listener.waitForSignIn(timeout: .seconds(timeout), logger: logger) {
                Self.say("Sign in to CloudKit at this address:")
                Self.say("")
                Self.say("  \(InertText.escaped(address))")
                Self.say("")
                if openBrowser, !Browser.isWebPage(address) {
                    Self.say("(not opened in your browser: the server's sign-in address is not an https:// address; check source.cloudkit.baseURL)")
                } else if openBrowser, await Browser.open(address) {
                    Self.say("(opened in your browser)")
                } else if openBrowser {
                    Self.say("(no browser here: open the address on any machine and use --paste, or open it in a browser on this one)")
                }
                Self.say(
                    "Waiting up to \(seconds) s for the browser to come back to \(listener.url), "
                        + "the API token's sign-in callback in CloudKit Dashboard.")
            } take: { callback in
                do {
                    return try await signIn(callback)
                } catch let refusal as SignInRefusal {
                    lastRefusal = refusal.sentence
                    Self.say(
                        "The browser came back to \(listener.url) without a sign-in: \(refusal.sentence). Still waiting, until \(seconds) s "
                            + "have passed: sign in again at the address above, or press Ctrl-C to stop.")
                    return nil
                }
            }
        } catch let error as SignInCallbackListener.ListenError {
            throw Self.stop("\(error)", Exit.failed)
        }
        guard let result else {
            if let lastRefusal {
                throw Self.stop(
                    "no sign-in came back to \(listener.url) within \(seconds) s (the last answer: \(lastRefusal)). To try again: "
                        + Self.command(pipelineFile: options.pipelineFile),
                    Exit.authentication)
            }
            throw Self.stop(
                "no sign-in came back to \(listener.url) within \(seconds) s; nothing was stored. Check that it is the API token's "
                    + "sign-in callback in CloudKit Dashboard, or sign in on another machine with --paste",
                Exit.authentication)
        }
        return result
    }

    /// Prints the address and reads the one the browser ended at from stdin.
    private func pasted(address: String) async throws -> SignInCallback {
        Self.say("Sign in to CloudKit at this address, in a browser on any machine:")
        Self.say("")
        Self.say("  \(InertText.escaped(address))")
        Self.say("")
        Self.say(
            "The browser then goes to the API token's sign-in callback (http://127.0.0.1:\(SignInCallbackListener.defaultPort)/callback "
                + "unless set otherwise in CloudKit Dashboard); the page may fail to load there, which is expected.")
        Self.say("Copy the whole address from the browser's address bar, paste it here and press Enter:")
        switch await StandardInput.readLine(maxBytes: SignInCallback.maxAddressBytes, timeout: .seconds(timeout)) {
        case .line(let line):
            return SignInCallback(address: line)
        case .tooLong:
            throw Self.stop("the pasted address is longer than a sign-in's (\(SignInCallback.maxAddressBytes) bytes); nothing was stored", Exit.authentication)
        case .endOfInput:
            throw Self.stop("no address was pasted (stdin ended); nothing was stored", Exit.authentication)
        case .timedOut:
            throw Self.stop("no address was pasted within \(timeout) s; nothing was stored", Exit.authentication)
        }
    }

    /// Checks the token and stores it in the pipeline's token store: the file, or the table in
    /// the destination (the embedded server started for it).
    private func store(
        _ token: String, settings: CloudKitSettings, pipeline: Pipeline, configuration: CloudKitClient.Configuration, logger: Logger
    ) async throws -> (UserIdentity, String) {
        guard settings.auth.webAuthTokenStore == .database else {
            let user = try await CloudKitClient.storeSignedInToken(token, configuration: configuration, logger: logger)
            return (user, configuration.webAuthTokenFile ?? "the token file")
        }
        return try await options.withDestination(pipeline, logger: logger) { destination in
            guard let vault = destination.sourceVault else {
                throw Self.stop(
                    "auth.webAuthTokenStore is database, but pipeline \(pipeline.name)'s destination keeps no token store; nothing was stored",
                    Exit.usage)
            }
            var configuration = configuration
            configuration.webAuthTokenVault = DestinationTokenVault(vault)
            let user = try await CloudKitClient.storeSignedInToken(token, configuration: configuration, logger: logger)
            return (user, vault.location)
        }
    }

    /// `zonefeed login <the pipeline file as given>`, as the exit-3 sentences of run and watch
    /// name it.
    static func command(pipelineFile: String) -> String {
        "\(Invocation.command) login \(Invocation.shellWord(pipelineFile))"
    }

    /// What run and watch say when CloudKit wants a person: the command first, then CloudKit's
    /// words.
    static func signInNeeded(pipelineFile: String, message: String, watching: Bool = false, signsIn: Bool = true) -> String {
        guard signsIn else {
            return watching
                ? "CloudKit refused the pipeline's credentials: stop this watch, fix them, then start it again. \(message)"
                : "CloudKit refused the pipeline's credentials: fix them, then run again. \(message)"
        }
        let login = command(pipelineFile: pipelineFile)
        return watching
            ? "CloudKit needs a new sign-in: stop this watch, run \(login), then start it again. \(message)"
            : "CloudKit needs a new sign-in: run \(login), then run again. \(message)"
    }

    /// A line on stdout at once (stdout may be a file, which Swift's print would hold back).
    static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// Prints the sentence on stderr and returns the exit code to throw.
    static func stop(_ sentence: String, _ code: ExitCode) -> ExitCode {
        FileHandle.standardError.write(Data("zonefeed login: \(sentence)\n".utf8))
        return code
    }
}
