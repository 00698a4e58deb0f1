import Foundation
import ZoneFeedCommandLine

// The commands live in ZoneFeedCommandLine, where a test can run them; this is the program: the
// command line's arguments, then exit with the command's code.
exit(await ZoneFeedCommand.run(arguments: Array(CommandLine.arguments.dropFirst())))
