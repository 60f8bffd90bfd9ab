console.log("fa: not yet");
